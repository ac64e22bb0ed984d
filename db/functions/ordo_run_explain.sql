-- Why each unfinished step of a run is not running, from the state the engine acts on: the run
-- (scheduled, waiting for its DAG's maxConcurrentRuns slot), the step's status and pending
-- dependencies, its queue item (ready or leased, its gate), the tenant's leased items against the
-- cap the claim applies (ordo_engine_claim), the gate's leased items against its limit, the wait a
-- step was handed back with (its latest `step.waiting` event: approval, signal, child run, map
-- instances, preconditions, an external worker's task, whose reason is ordo_task_wait_reason's),
-- and a retry's backoff (its latest `step.retrying` event: the retry job runs at that time).
--
-- One row per unfinished step, in topological order with ties by step id: a stable reason code
-- and its details (camelCase keys, as the API answers them; times in UTC with milliseconds). The
-- first row that holds the run up (neither running nor waiting on its dependencies) is the run's
-- headline. A finished run, or a run of another tenant, has no rows.
--
-- The cap of steps in flight is the one a claim applies (ordo_in_flight_cap): the tenant's plan's
-- (tenant_queue.max_in_flight) or else p_cap (ORDO_TENANT_MAX_IN_FLIGHT), and while tenants share
-- the engine at most p_shared_cap (ORDO_TENANT_SHARED_IN_FLIGHT; null when they do not share)
-- times the tenant's fair-share weight. A step held by its plan's cap says `plan_limit`.

create or replace function ordo_run_explain(p_tenant text, p_run uuid, p_cap integer, p_shared_cap integer)
  returns table (step_id text, status text, reason text, detail jsonb, headline boolean)
  language plpgsql
  stable
  set jit = off
  as $$
#variable_conflict use_column
declare
  v_utc constant text := 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"';
  v_run run;
  v_cap integer;
  v_plan_cap integer;
  v_in_flight integer;
  v_limit integer;
  v_running integer;
  v_ahead integer;
begin
  select r.* into v_run from run r where r.tenant_id = p_tenant and r.run_id = p_run;
  if not found or v_run.status in ('succeeded', 'failed', 'cancelled') then
    return;
  end if;
  -- The claim passes over a tenant whose leased items reach its cap.
  select ordo_in_flight_cap(tq.max_in_flight, tq.weight, jsonb_build_object('cap', p_cap, 'sharedCap', p_shared_cap)),
    tq.max_in_flight
  into v_cap, v_plan_cap
  from tenant_queue tq where tq.tenant_id = p_tenant;
  v_cap := coalesce(v_cap, ordo_in_flight_cap(null, 1, jsonb_build_object('cap', p_cap, 'sharedCap', p_shared_cap)));
  select count(*)::integer into v_in_flight from queue_item q where q.tenant_id = p_tenant and q.state = 'leased';
  -- A run waiting for its DAG's maxConcurrentRuns slot: its own version's limit, the runs of the
  -- DAG that count against it, and the waiting runs that are admitted before it (oldest first).
  if v_run.status = 'queued' and not v_run.admitted then
    select (dv.definition->'constraints'->'maxConcurrentRuns'->>'limit')::integer into v_limit
    from dag_version dv
    where dv.tenant_id = p_tenant and dv.dag_id = v_run.dag_id and dv.version = v_run.dag_version;
    select count(*)::integer into v_running from run r
    where r.tenant_id = p_tenant and r.dag_id = v_run.dag_id and r.status in ('queued', 'running') and r.admitted;
    select count(*)::integer into v_ahead from run r
    where r.tenant_id = p_tenant and r.dag_id = v_run.dag_id and r.status = 'queued' and not r.admitted
      and (r.created_at, r.run_id) < (v_run.created_at, v_run.run_id);
  end if;

  return query
  with s as (
    select st.step_id, st.status, st.depends_on, st.pending_deps, st.spec, st.topo_index, st.map_size, st.map_left,
      st.attempts
    from step st
    where st.tenant_id = p_tenant and st.run_id = p_run
      and st.status in ('pending', 'queued', 'running', 'waiting', 'retrying', 'orphaned')
  ),
  -- The run's queue items, read once (the queue has no index by run; it holds only ready and leased work).
  qi as materialized (
    select q.step_id, q.id, q.state, q.gate, q.gate_limit, q.priority, q.worker_id, q.lease_expires_at
    from queue_item q
    where q.tenant_id = p_tenant and q.run_id = p_run and exists (select 1 from s where s.status in ('queued', 'running'))
  ),
  x as (
    select s.step_id, s.status, s.topo_index,
      case
        -- A step whose dependencies have not all ended waits for them, whatever else holds the run.
        when s.status = 'pending' and s.pending_deps > 0 then
          jsonb_build_object('reason', 'dependencies', 'trigger', s.spec->>'trigger',
            'waitingOn', coalesce((
              select jsonb_agg(d.step_id order by d.topo_index, d.step_id) from step d
              where d.tenant_id = p_tenant and d.run_id = p_run and d.step_id = any(s.depends_on)
                and d.status not in ('succeeded', 'failed', 'skipped', 'cancelled')
            ), '[]'))
        when s.status = 'pending' and v_run.status = 'scheduled' then
          jsonb_build_object('reason', 'scheduled', 'at', to_char(v_run.not_before at time zone 'UTC', v_utc))
        when s.status = 'pending' and v_run.status = 'queued' and not v_run.admitted then
          jsonb_build_object('reason', 'max_concurrent_runs', 'limit', v_limit, 'running', v_running,
            'runsAhead', v_ahead)
        when s.status = 'queued' and q.state = 'ready' and v_in_flight >= v_cap and v_cap = v_plan_cap then
          jsonb_build_object('reason', 'plan_limit', 'limit', 'maxStepsInFlight', 'inFlight', v_in_flight, 'cap', v_cap)
        when s.status = 'queued' and q.state = 'ready' and v_in_flight >= v_cap then
          jsonb_build_object('reason', 'tenant_in_flight_cap', 'inFlight', v_in_flight, 'cap', v_cap,
            'shared', v_cap < coalesce(v_plan_cap, p_cap))
        when s.status = 'queued' and q.state = 'ready' and g.running >= q.gate_limit then
          jsonb_build_object('reason', 'concurrency_gate', 'gate', q.gate, 'limit', q.gate_limit, 'running', g.running)
        when s.status = 'queued' and q.state = 'ready' then
          jsonb_build_object('reason', 'ready', 'ahead', a.ahead)
        when s.status = 'running' and coalesce(q.worker_id, t.worker_id) is not null then
          jsonb_build_object('reason', 'running', 'worker', coalesce(q.worker_id, t.worker_id),
            'leaseExpiresAt', to_char(coalesce(q.lease_expires_at, t.lease_expires_at) at time zone 'UTC', v_utc))
        when s.status = 'retrying' and b.created_at is not null then
          jsonb_build_object('reason', 'backoff',
            'until', to_char((b.created_at + make_interval(secs => (b.data->>'retryInMs')::numeric / 1000))
              at time zone 'UTC', v_utc),
            'nextAttempt', (b.data->>'nextAttempt')::integer, 'error', b.data->'error'->>'code')
        when s.status = 'waiting' then
          case w.data->>'kind'
            when 'approval' then
              jsonb_build_object('reason', 'approval', 'since', to_char(w.created_at at time zone 'UTC', v_utc),
                'timeoutAt', to_char((w.created_at + make_interval(secs => (w.data->>'timeoutMs')::numeric / 1000))
                  at time zone 'UTC', v_utc))
            when 'signal' then
              jsonb_build_object('reason', 'signal', 'name', w.data->>'name', 'correlationKey', w.data->>'correlationKey',
                'since', to_char(w.created_at at time zone 'UTC', v_utc),
                'timeoutAt', to_char((w.created_at + make_interval(secs => (w.data->>'timeoutMs')::numeric / 1000))
                  at time zone 'UTC', v_utc))
            when 'dag' then
              jsonb_build_object('reason', 'child_run', 'childRunId', w.data->>'childRunId', 'childStatus', c.status)
            when 'map' then
              jsonb_build_object('reason', 'map_instances', 'total', s.map_size, 'left', s.map_left)
            when 'precondition' then
              jsonb_build_object('reason', 'condition_pending', 'since', to_char(w.created_at at time zone 'UTC', v_utc),
                'expression', w.data->>'expression', 'checkEveryMs', (w.data->>'checkEveryMs')::integer,
                'maxWaitMs', (w.data->>'maxWaitMs')::integer)
            when 'queue' then
              case
                when k.status = 'pending' then
                  jsonb_build_object('reason', ordo_task_wait_reason(p_tenant, k.pool, k.task_type, k.requires),
                    'pool', k.pool, 'taskType', k.task_type,
                    'dispatchDeadline', to_char(k.dispatch_deadline at time zone 'UTC', v_utc))
                when k.status in ('assigned', 'delivered') then
                  jsonb_build_object('reason', 'running', 'worker', kw.name, 'workerId', k.worker_id,
                    'pool', k.pool, 'taskType', k.task_type)
              end
          end
      end as d
    from s
    left join qi q on q.step_id = s.step_id and s.status in ('queued', 'running')
    left join lateral (
      select count(*)::integer as running from queue_item l
      where l.tenant_id = p_tenant and l.gate = q.gate and l.state = 'leased'
    ) g on q.gate is not null
    -- The tenant's ready items the claim takes before this one (a higher priority, or the same and
    -- older), counted up to 1,000; gated items are claimed by their gate's turn and not counted.
    left join lateral (
      select least(1000, (
        select count(*) from (
          select 1 from queue_item o
          where o.tenant_id = p_tenant and o.state = 'ready' and o.gate is null and o.priority > q.priority
          limit 1000
        ) o1
      ) + (
        select count(*) from (
          select 1 from queue_item o
          where o.tenant_id = p_tenant and o.state = 'ready' and o.gate is null and o.priority = q.priority and o.id < q.id
          limit 1000
        ) o2
      ))::integer as ahead
    ) a on q.state = 'ready' and q.gate is null
    left join lateral (
      select at.worker_id, at.lease_expires_at from attempt at
      where at.tenant_id = p_tenant and at.run_id = p_run and at.step_id = s.step_id and at.attempt = s.attempts
        and at.status = 'running'
      limit 1
    ) t on s.status = 'running'
    left join lateral (
      select e.created_at, e.data from run_event e
      where e.tenant_id = p_tenant and e.run_id = p_run and e.step_id = s.step_id and e.type = 'step.retrying'
      order by e.seq desc limit 1
    ) b on s.status = 'retrying'
    left join lateral (
      select e.created_at, e.data from run_event e
      where e.tenant_id = p_tenant and e.run_id = p_run and e.step_id = s.step_id and e.type = 'step.waiting'
      order by e.seq desc limit 1
    ) w on s.status = 'waiting'
    left join run c on c.tenant_id = p_tenant and c.run_id = (w.data->>'childRunId')::uuid and w.data->>'kind' = 'dag'
    left join lateral (
      select wt.status, wt.pool, wt.task_type, wt.requires, wt.worker_id, wt.dispatch_deadline from worker_task wt
      where wt.tenant_id = p_tenant and wt.run_id = p_run and wt.step_id = s.step_id
      order by wt.attempt desc limit 1
    ) k on w.data->>'kind' = 'queue'
    left join worker kw on kw.tenant_id = p_tenant and kw.worker_id = k.worker_id
  ),
  -- Details without the absent ones; a step the engine is moving between states, in the statement
  -- that moves it, is shown by its status.
  y as materialized (
    select x.step_id, x.status, x.topo_index, jsonb_strip_nulls(coalesce(x.d, jsonb_build_object('reason', x.status))) as d
    from x
  ),
  h as (
    select y.step_id from y where y.d->>'reason' not in ('running', 'dependencies')
    order by y.topo_index, y.step_id limit 1
  )
  select y.step_id, y.status, y.d->>'reason', y.d - 'reason', y.step_id = coalesce((select h.step_id from h), '')
  from y
  order by y.topo_index, y.step_id;
end
$$;

revoke all on function ordo_run_explain(text, uuid, integer, integer) from public;
grant all on function ordo_run_explain(text, uuid, integer, integer) to ordo_app, ordo_system;
