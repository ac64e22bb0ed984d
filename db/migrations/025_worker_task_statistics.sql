-- External workers' tasks are among the hot tables whose statistics follow their growth
-- (ordo_analyze_hot): statistics on the columns their statements look rows up or filter by, at
-- the small sample of the engine's tables (so each such ANALYZE stays cheap), and none on the rest.
do $$
declare
  v_col text;
begin
  foreach v_col in array array['tenant_id', 'task_id', 'run_id', 'step_id', 'pool', 'task_type', 'status', 'worker_id',
      'deadline', 'dispatch_deadline'] loop
    execute format('alter table worker_task alter column %I set statistics 10', v_col);
  end loop;
  foreach v_col in array array['attempt', 'epoch', 'dag_id', 'dag_version', 'requires', 'strategy', 'priority', 'inputs',
      'inputs_sealed', 'traceparent', 'created_at', 'assigned_at', 'delivered_at', 'finished_at', 'end_reason',
      'result_digest', 'progress', 'late_results'] loop
    execute format('alter table worker_task alter column %I set statistics 0', v_col);
  end loop;
end
$$;
