-- A queue step's task, inside ordo_engine_advance: each queue step handed back as waiting at its
-- epoch (`p_tasks`: tenant_id, run_id, step_id, epoch, task) gets one task for its attempt, pending
-- in its pool with what the step's config made of it (task type, requirements, strategy, inputs, the
-- secret values they carry, its timeout, counted from its assignment to a worker, the dispatch
-- deadline from its dispatchTimeout), and the pool's dispatchers are woken (ordo_task_dispatch runs in their own
-- transactions, so this one takes no lock beyond its runs').

create or replace function ordo_task_open(p_tasks jsonb, p_c ordo_adv_result[]) returns void
  language plpgsql
  set jit = off
  as $$
declare
  v_pool record;
begin
  for v_pool in
    with t as (
      insert into worker_task (tenant_id, task_id, run_id, step_id, attempt, epoch, dag_id, dag_version, pool,
        task_type, requires, strategy, priority, inputs, inputs_sealed, secrets_sealed, traceparent, timeout_ms,
        dispatch_deadline)
      select x.tenant_id, gen_random_uuid(), x.run_id, x.step_id, c.attempt, x.epoch, r.dag_id, r.dag_version,
        x.task->>'pool', x.task->>'taskType', coalesce(x.task->'requires', '{}'), x.task->>'strategy',
        coalesce((s.spec->>'priority')::smallint, 5), x.task->'inputs', x.task->'inputsSealed', x.task->'secretsSealed',
        x.task->>'traceparent', (x.task->>'timeoutMs')::integer,
        case when x.task ? 'dispatchTimeoutMs'
          then now() + make_interval(secs => (x.task->>'dispatchTimeoutMs')::numeric / 1000) end
      from jsonb_to_recordset(p_tasks) as x(tenant_id text, run_id uuid, step_id text, epoch integer, task jsonb)
      join unnest(p_c) c on c.tenant_id = x.tenant_id and c.run_id = x.run_id and c.step_id = x.step_id
        and c.epoch = x.epoch and c.outcome = 'waiting'
      join step s on s.tenant_id = x.tenant_id and s.run_id = x.run_id and s.step_id = x.step_id
        and s.status = 'waiting' and s.epoch = x.epoch
      join run r on r.tenant_id = x.tenant_id and r.run_id = x.run_id
      order by c.ord
      on conflict do nothing
      returning tenant_id, pool
    )
    select distinct t.tenant_id, t.pool from t order by 1, 2
  loop
    perform ordo_notify('ordo_dispatch', jsonb_build_array(v_pool.tenant_id, v_pool.pool)::text);
  end loop;
end
$$;

revoke all on function ordo_task_open(jsonb, ordo_adv_result[]) from public;
grant all on function ordo_task_open(jsonb, ordo_adv_result[]) to ordo_system;
