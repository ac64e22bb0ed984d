-- The export's run order is (startedUtc, dagId, runId) with startedUtc to the millisecond, as the
-- export writes it and a verifier checks it; dag ids in byte order. Runs started in the same
-- millisecond by different transactions sort by dag id and run id, not by the microseconds the
-- export does not show, and a page of the export resumes exactly after the last run of the one
-- before.
create index run_export_ms_idx on run (
  tenant_id,
  date_trunc('milliseconds', coalesce(started_at, created_at) at time zone 'UTC'),
  (dag_id collate "C"),
  run_id
);
drop index run_export_idx;
