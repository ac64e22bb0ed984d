-- Smaller statistics for the engine's high-volume tables. Their statements find rows by key, so the
-- planner needs their row counts and how many distinct keys they hold, not a histogram of every
-- column; yet ANALYZE samples 300 rows per unit of the largest statistics target (30,000 rows at the
-- default 100) and sorts each sampled column, JSON and 64-character hashes included. The engine
-- analyzes these tables as they grow (PlanRefresh): in a burst of 7,000 steps on an empty database,
-- run_event took 270 ms of a core each time, attempt 90 ms. Columns no statement filters or joins
-- on get no statistics (target 0); the keys a target of 10 (3,000 rows sampled).
do $$
declare
  v record;
begin
  for v in
    select * from (values
      ('run_event', array['tenant_id', 'run_id', 'seq', 'type', 'stream_id'],
        array['created_at', 'step_id', 'attempt', 'actor', 'data', 'prev_hash', 'hash', 'stream_xid']),
      ('attempt', array['tenant_id', 'run_id', 'step_id', 'attempt', 'created_at', 'epoch', 'status'],
        array['worker_id', 'lease_expires_at', 'traceparent', 'queued_at', 'claimed_at', 'constraint_checked_at',
          'started_at', 'finished_at', 'terminated_at', 'error', 'outputs_hash', 'logs_hash']),
      ('step', array['tenant_id', 'run_id', 'step_id', 'status', 'pending_deps'],
        array['reason', 'plugin', 'config', 'spec', 'depends_on', 'topo_index', 'dispatch_seq', 'attempts', 'epoch',
          'outputs', 'outputs_hash', 'logs_hash', 'error', 'from_rerun', 'queued_at', 'started_at', 'finished_at']),
      ('span', array['tenant_id', 'trace_id', 'span_id', 'started_at', 'run_id'],
        array['parent_span_id', 'name', 'kind', 'step_id', 'ended_at', 'status_code', 'status_message', 'attributes']),
      ('artifact', array['tenant_id', 'sha256', 'created_on'],
        array['media_type', 'size', 'body_json', 'body_bytes', 'created_at'])
    ) as t(tbl, keys, rest)
  loop
    for i in 1 .. cardinality(v.keys) loop
      execute format('alter table %I alter column %I set statistics 10', v.tbl, v.keys[i]);
    end loop;
    for i in 1 .. cardinality(v.rest) loop
      execute format('alter table %I alter column %I set statistics 0', v.tbl, v.rest[i]);
    end loop;
  end loop;
end
$$;
