-- Run creation in one statement, committed on its own: binds the tenant named in the input, checks
-- that each DAG version the caller planned with is still the one to use (active, and the latest
-- active one when the request named none; else it writes nothing and says which DAG to look up
-- again), and writes the runs, their steps, events and ready queue items (a scheduled run: its start
-- job instead of queue items). Inside a transaction already bound to the same tenant (replay,
-- rerun, a DAG with a maxConcurrentRuns limit, whose slots are counted first) it is that
-- transaction's insert. A run token already used is not written
-- again: its run is returned instead.
--
-- Quotas of the tenant's plan (ordo_tenant_limits): monthlyRuns (runs created in the calendar month
-- of the tenant's time zone, counted in tenant_usage), maxConcurrentRuns (open runs: scheduled,
-- queued or running) and maxQueuedSteps (ready queue items). Only top-level runs are checked and
-- counted: a child run of a `dag` step belongs to its parent's run, whose creation was. The new runs
-- are taken in the given order while all of them fit; the first that does not and every one after
-- it are not written and come back as 'quota' rows naming the limit, its value and the use then.
-- A tenant with any of these limits has its creations serialized by a transaction-level advisory
-- lock taken before its use is read, so concurrent creators (any number of api processes) cannot
-- both take the last unit; a tenant without them takes no lock and reads nothing more than its
-- plan row. Every top-level run written by a tenant with a plan adds to its period's count.
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
  v_limits jsonb;
  v_tz text;
  v_period date;
  v_monthly bigint;
  v_max_open bigint;
  v_max_queued bigint;
  v_refused jsonb := '[]';
  v_refused_ids uuid[] := '{}';
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

  -- The plan's quotas (a tenant without a plan has none and counts nothing).
  select l.limits, l.time_zone into v_limits, v_tz from ordo_tenant_limits(v_t) l;
  if found then
    v_period := date_trunc('month', now() at time zone v_tz)::date;
    v_monthly := (v_limits->>'monthlyRuns')::bigint;
    v_max_open := (v_limits->>'maxConcurrentRuns')::bigint;
    v_max_queued := (v_limits->>'maxQueuedSteps')::bigint;
  end if;
  -- (Child runs alone, as the engine starts them, are neither checked nor counted: no lock.)
  if coalesce(v_monthly, v_max_open, v_max_queued) is not null
    and exists (select 1 from jsonb_to_recordset(p->'runs') as u(parent_run_id uuid) where u.parent_run_id is null) then
    perform pg_advisory_xact_lock(hashtextextended('ordo.quota:' || v_t, 0));
    -- (Each statement below reads what the lock's previous holder committed.)
    with used as (
      select
        coalesce((select tu.runs_created from tenant_usage tu where tu.tenant_id = v_t and tu.period_start = v_period), 0)
          as runs,
        case when v_max_open is not null then (
          select count(*) from run o
          where o.tenant_id = v_t and o.status in ('scheduled', 'queued', 'running') and o.parent_run_id is null
        ) end as open_runs,
        case when v_max_queued is not null then (
          select count(*) from queue_item qi where qi.tenant_id = v_t and qi.state = 'ready'
        ) end as queued
    ),
    -- The top-level runs this call would write (a used token is not a creation), in the given order.
    fresh as (
      select u.run_id, u.n, (not coalesce(u.finished, false))::integer as opens,
        (select count(*) from jsonb_to_recordset(p->'queue') as qq(run_id uuid) where qq.run_id = u.run_id) as queues
      from rows from (jsonb_to_recordset(p->'runs') as (run_id uuid, dag_id text, run_token text, parent_run_id uuid,
        finished boolean)) with ordinality as u(run_id, dag_id, run_token, parent_run_id, finished, n)
      where u.parent_run_id is null
        and not exists (select 1 from run o where o.tenant_id = v_t and o.dag_id = u.dag_id and o.run_token = u.run_token)
    ),
    -- Use before each run (the runs before it in the list included) and the first limit it would pass.
    c as (
      select f.run_id, f.n,
        used.runs + count(*) over w - 1 as runs_before,
        used.open_runs + sum(f.opens) over w - f.opens as open_before,
        used.queued + sum(f.queues) over w - f.queues as queued_before,
        f.opens, f.queues
      from fresh f cross join used
      window w as (order by f.n rows between unbounded preceding and current row)
    ),
    v as (
      select c.*,
        case
          when v_monthly is not null and c.runs_before + 1 > v_monthly then 'monthlyRuns'
          when v_max_open is not null and c.opens > 0 and c.open_before + 1 > v_max_open then 'maxConcurrentRuns'
          when v_max_queued is not null and c.queues > 0 and c.queued_before + c.queues > v_max_queued then 'maxQueuedSteps'
        end as hit
      from c
    ),
    -- From the first run over a limit on, none is written; the use reported is that of the runs admitted.
    cut as (select min(v.n) as n from v where v.hit is not null)
    select coalesce(jsonb_agg(jsonb_build_object(
        'run_id', v.run_id,
        'limit', coalesce(v.hit, f1.hit),
        'value', case coalesce(v.hit, f1.hit)
          when 'monthlyRuns' then v_monthly when 'maxConcurrentRuns' then v_max_open else v_max_queued end,
        'current', case coalesce(v.hit, f1.hit)
          when 'monthlyRuns' then f1.runs_before when 'maxConcurrentRuns' then f1.open_before
          else f1.queued_before end)
        order by v.n), '[]')
    into v_refused
    from v cross join cut join v f1 on f1.n = cut.n
    where v.n >= cut.n;
    v_refused_ids := array(select (qr->>'run_id')::uuid from jsonb_array_elements(v_refused) qr);
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
    where u.run_id <> all(v_refused_ids)
    on conflict (tenant_id, dag_id, run_token) do nothing
    returning run.run_id, run.dag_id, run.status, run.not_before, run.parent_run_id
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
  -- The period's count of a tenant with a plan: the top-level runs written.
  uc as (
    insert into tenant_usage (tenant_id, period_start, runs_created)
    select v_t, v_period, count(*) from r where r.parent_run_id is null and v_period is not null
    having count(*) > 0
    on conflict (tenant_id, period_start) do update set runs_created = tenant_usage.runs_created + excluded.runs_created
    returning 1
  ),
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
  -- The inserts (s, e, tq, q, uc) run to completion whether read or not; w and j only when read.
  select 'created'::text,
    jsonb_build_object('run_id', r.run_id, 'woken', (select count(*) from w), 'start_jobs', (select count(*) from j))
  from r
  union all
  select 'existing'::text, x.item from x
  union all
  select 'quota'::text, qr.value from jsonb_array_elements(v_refused) qr;

  -- `publishCounts` (a batch of as many runs as PlanRefresh's floor, src/core/database/prepared.ts):
  -- this session's row counts are published when it next goes idle, not at its next flush (up to ten
  -- seconds later for a session then left idle); until the statistics see the rows, the engine keeps
  -- plans made for an empty table.
  if (p->>'publishCounts')::boolean then
    perform pg_stat_force_next_flush();
  end if;
end
$$;

revoke all on function ordo_create_runs(p jsonb) from public;
grant all on function ordo_create_runs(p jsonb) to ordo_app;
