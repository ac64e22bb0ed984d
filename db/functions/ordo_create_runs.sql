-- Run creation in one statement, committed on its own: binds the tenant named in the input, checks
-- that each DAG version the caller planned with is still the one to use (active, and the latest
-- active one when the request named none; else it writes nothing and says which DAG to look up
-- again), and writes the runs, their steps, events and ready queue items (a scheduled run: its start
-- job instead of queue items). Inside a transaction already bound to the same tenant (replay,
-- rerun, a DAG with a maxConcurrentRuns limit, whose slots are counted first) it is that
-- transaction's insert. A run token already used is not written
-- again: its run is returned instead.
--
-- Called by the application role: row-level security applies to every statement, bound to the
-- tenant named in the input (a transaction bound to another tenant is refused).

create or replace function ordo_create_runs(p jsonb) returns table (kind text, item jsonb)
  language plpgsql
  set jit = off
  as $$
declare
  v_t text := p->>'tenant';
  v_now timestamptz := (p->>'now')::timestamptz;
  v_bound text := nullif(current_setting('app.tenant_id', true), '');
  v_stale jsonb;
begin
  if v_t is null or (v_bound is not null and v_bound <> v_t) then
    raise exception 'ordo_create_runs: the transaction is bound to another tenant' using errcode = 'insufficient_privilege';
  end if;
  perform set_config('app.tenant_id', v_t, true);

  -- The versions the runs were planned with: each active, and the newest active version of its
  -- DAG where the request named no version.
  select jsonb_agg(v.d) into v_stale
  from jsonb_to_recordset(coalesce(p->'versions', '[]')) as v(d text, v integer, latest boolean)
  where not exists (
      select 1 from dag_version dv
      where dv.tenant_id = v_t and dv.dag_id = v.d and dv.version = v.v and dv.status = 'active'
    )
    or (v.latest and exists (
      select 1 from dag_version dv
      where dv.tenant_id = v_t and dv.dag_id = v.d and dv.version > v.v and dv.status = 'active'
    ));
  if v_stale is not null then
    return query select 'stale'::text, d from jsonb_array_elements(v_stale) d;
    return;
  end if;

  -- The runs (skipping (tenant, dag, runToken) duplicates), and only for those inserted their steps,
  -- chained events and ready queue items (in the given order), the tenant's queue row, and the
  -- workers' wake-up.
  return query
  with r as (
    insert into run (tenant_id, run_id, dag_id, dag_version, content_hash, run_token, inputs, inputs_hash, status, reason,
      trace_id, requested_by, replay_of, rerun_of, rerun_from_step, parent_run_id, parent_step_id, depth, admitted,
      steps_total, steps_remaining, event_seq, event_hash, finished_at, priority, not_before)
    select v_t, u.run_id, u.dag_id, u.dag_version, u.content_hash, u.run_token, u.inputs, u.inputs_hash, u.status,
      u.reason, u.trace_id, u.requested_by, u.replay_of, u.rerun_of, u.rerun_from_step, u.parent_run_id, u.parent_step_id,
      coalesce(u.depth, 0), u.admitted, u.steps_total, u.steps_remaining, u.event_seq, u.event_hash,
      case when u.finished then now() end, coalesce(u.priority, 5), u.not_before
    from jsonb_to_recordset(p->'runs') as u(run_id uuid, dag_id text, dag_version integer, content_hash text,
      run_token text, inputs jsonb, inputs_hash text, status text, reason text, trace_id text, requested_by text,
      replay_of uuid, rerun_of uuid, rerun_from_step text, parent_run_id uuid, parent_step_id text, depth smallint,
      admitted boolean, steps_total integer, steps_remaining integer, event_seq integer, event_hash text, finished boolean,
      priority smallint, not_before timestamptz)
    on conflict (tenant_id, dag_id, run_token) do nothing
    returning run.run_id, run.dag_id, run.status, run.not_before
  ),
  s as (
    insert into step (tenant_id, run_id, step_id, status, reason, plugin, config, spec, depends_on, topo_index, pending_deps,
      from_rerun, outputs, outputs_hash, queued_at, finished_at)
    select v_t, u.run_id, u.step_id, u.status, u.reason, u.plugin, u.config, u.spec,
      array(select jsonb_array_elements_text(u.deps)), u.topo_index, u.pending_deps, u.from_rerun, u.outputs,
      u.outputs_hash, case when u.status = 'queued' then v_now end,
      case when u.status in ('skipped', 'succeeded', 'cancelled') then v_now end
    from jsonb_to_recordset(p->'steps') as u(run_id uuid, step_id text, status text, reason text, plugin text,
      config jsonb, spec jsonb, deps jsonb, topo_index integer, pending_deps integer, from_rerun boolean, outputs jsonb,
      outputs_hash text)
    where u.run_id in (select r.run_id from r)
    returning step.run_id, step.step_id, step.spec
  ),
  e as (
    insert into run_event (tenant_id, run_id, seq, created_at, type, step_id, attempt, actor, data, prev_hash, hash)
    select v_t, u.run_id, u.seq, u.created_at, u.type, u.step_id, u.attempt, u.actor, u.data, u.prev_hash, u.hash
    from rows from (jsonb_to_recordset(p->'events') as (run_id uuid, seq integer, created_at timestamptz, type text,
      step_id text, attempt integer, actor text, data jsonb, prev_hash text, hash text))
      with ordinality as u(run_id, seq, created_at, type, step_id, attempt, actor, data, prev_hash, hash, n)
    where u.run_id in (select r.run_id from r)
    -- In the given order (each run's events by number): the live stream's cursor follows it.
    order by u.n
    returning 1
  ),
  tq as (
    insert into tenant_queue (tenant_id)
    select v_t
    where exists (select 1 from s) and not exists (select 1 from tenant_queue t where t.tenant_id = v_t)
    on conflict (tenant_id) do nothing
    returning 1
  ),
  q as (
    insert into queue_item (tenant_id, run_id, step_id, gate, gate_limit, priority)
    select v_t, u.run_id, u.step_id, ordo_step_gate(r.dag_id, u.step_id, s.spec), (s.spec->>'concurrency')::integer,
      coalesce((s.spec->>'priority')::smallint, 5)
    from rows from (jsonb_to_recordset(p->'queue') as (run_id uuid, step_id text)) with ordinality as u(run_id, step_id, n)
    join r on r.run_id = u.run_id
    join s on s.run_id = u.run_id and s.step_id = u.step_id
    order by u.n
    returning 1
  ),
  w as (select pg_notify('ordo_ready', v_t) where exists (select 1 from q)),
  -- A scheduled run's start at its notBefore (job ordo.engine.start_run, src/modules/engine/jobs.ts).
  j as (select ordo_add_start_job(r.run_id, r.not_before) from r where r.status = 'scheduled'),
  -- Runs whose token was used already: the stored run, for the caller to compare its inputs.
  x as (
    select jsonb_build_object('run_id', o.run_id, 'dag_id', o.dag_id, 'run_token', o.run_token,
      'inputs_hash', o.inputs_hash, 'status', o.status, 'trace_id', o.trace_id) as item
    from jsonb_to_recordset(p->'runs') as u(run_id uuid, dag_id text, run_token text)
    join run o on o.tenant_id = v_t and o.dag_id = u.dag_id and o.run_token = u.run_token
    where u.run_id not in (select r.run_id from r)
  )
  -- The inserts (s, e, tq, q) run to completion whether read or not; w and j only when read.
  select 'created'::text,
    jsonb_build_object('run_id', r.run_id, 'woken', (select count(*) from w), 'start_jobs', (select count(*) from j))
  from r
  union all
  select 'existing'::text, x.item from x;
end
$$;

revoke all on function ordo_create_runs(p jsonb) from public;
grant all on function ordo_create_runs(p jsonb) to ordo_app;
