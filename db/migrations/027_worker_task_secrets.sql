-- The secret values a queue step's task hands its worker in its inputs (allowSecrets), sealed and
-- bound to the attempt as inputs_sealed is: the worker's outputs, error message, logs and progress
-- are redacted against them before they are kept. Dropped with the inputs when the task ends.
alter table worker_task add column secrets_sealed jsonb;
