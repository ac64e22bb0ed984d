-- worker_task_attempt_key (unique on tenant_id, run_id, step_id, attempt) already indexes what
-- worker_task_step_idx indexed, column for column: every task written kept both up to date.
drop index if exists worker_task_step_idx;
