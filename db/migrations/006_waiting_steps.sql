-- Steps that wait for a decision (approval steps): a worker hands such a step back as waiting,
-- which frees its slot and lease (its attempt stays open), and a decision, or its timeout, resumes it.
alter table step drop constraint step_status_check;
alter table step add constraint step_status_check check (status = any (array[
  'pending', 'queued', 'running', 'waiting', 'succeeded', 'failed', 'skipped', 'cancelled', 'retrying', 'orphaned']));

insert into state_transition (entity, from_state, to_state) values
  ('step', 'running', 'waiting'),
  ('step', 'waiting', 'running'),
  ('step', 'waiting', 'cancelled');

-- Cancelling a run ends the open attempt of a step that waits (no worker holds it to report).
grant update on table attempt to ordo_app;
