-- Runs waiting for a maxConcurrentRuns slot, per DAG, oldest first. Every engine transaction that
-- ends runs looks here, so the lookup must not scan the DAG's active runs.
create index run_waiting_idx on run (tenant_id, dag_id, created_at, run_id) where status = 'queued' and not admitted;
