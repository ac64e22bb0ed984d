-- What every result of a step attempt does, in one statement and one commit: the only home of
-- these rules. A worker reports its results here (the reaper its expired leases, as `orphaned`);
-- this function
--   - locks the results' runs (in key order, as every engine transaction does) and sorts each result
--     into its outcome: applied when its step still runs at the reported epoch; otherwise recorded
--     on its attempt and refused (`step.result_rejected`, never applied), or, for a stopped attempt
--     of a cancelled run, only recorded; a reaper's report whose lease was renewed meanwhile is dropped;
--   - applies each outcome: success (outputs kept), or failure (a stopped attempt of a running run is a
--     retryable ABORTED, an expired lease a retryable LEASE_EXPIRED after `step.orphaned`): retried
--     after its backoff (`step.retrying`, a retry job) while the step's policy allows and the error is
--     retryable, else failed, with every pending step downstream skipped (upstream_failed); a failure
--     whose error is invalid_input, or permanent on a step with failRun, fails its run at once;
--   - releases the results' leases, counts successes down on their dependents in waves (a disabled
--     step that becomes ready is skipped and counts as done for its own dependents), dispatches ready
--     successors to the reporting worker while it has room and their tenant is under its in-flight cap
--     (topological order, ties by step id; a step under a concurrency gate always goes through the
--     queue; with `only`, only steps of that plugin, which the caller hands back before its commit,
--     so they take no lease and only the room counts), queues the rest and wakes the workers;
--   - ends the runs with no step left (failed if any step failed), with the hash of their steps'
--     outputs, enters the failed ones of DAGs with `onFailure: deadletter` in their tenant's
--     dead-letter, and admits runs waiting for their DAG's maxConcurrentRuns slot (ordo_admit_waiting);
--   - fans map steps handed back with their elements out to their instances (ordo_map_expand), and
--     ends the map steps whose instances all ended (ordo_map_join); opens the tasks of queue steps
--     handed back with one for external workers (ordo_task_open);
--   - appends the hash-chained events of all this to each run, in the order it happened.
-- Returns the steps dispatched to the worker ('dispatch'), the events that start or end runs or
-- retry steps ('event', for metrics and spans) and the notifications to send after the commit
-- ('notify').

create or replace function ordo_engine_advance(p jsonb) returns table (kind text, item jsonb)
  language plpgsql
  set jit = off
  set plan_cache_mode = force_generic_plan
  set enable_seqscan = off
  set enable_hashjoin = off
  set enable_mergejoin = off
  as $$
declare
  v_now timestamptz := date_trunc('milliseconds', now());
  v_worker text := p->>'worker';
  v_lease interval := make_interval(secs => (p->>'leaseMs')::numeric / 1000);
  v_capacity integer := greatest(0, (p->>'capacity')::integer);
  v_only text := p->>'only';
  v_c ordo_adv_result[];
  v_e ordo_adv_event[] := '{}';
  v_ready ordo_adv_ready[] := '{}';
  v_wave_ready ordo_adv_ready[];
  v_done ordo_step_key[];
  v_ok ordo_step_key[];
  v_dfail ordo_step_key[];
  v_dskip ordo_step_key[];
  v_skipped ordo_step_key[] := '{}';
  v_ff ordo_step_key[] := '{}';
  v_ffc ordo_adv_skip[] := '{}';
  v_dl ordo_step_key[] := '{}';
  v_wave_skipped ordo_adv_skip[];
  v_ch ordo_adv_chained[];
  v_admitted ordo_adv_chained[] := '{}';
  v_d jsonb[] := '{}';
  v_ended uuid[];
  v_ending ordo_adv_ending[] := '{}';
  v_rel jsonb;
  v_wave integer := 0;
  v_all_succeeded boolean;
  v_claim integer := 0;
  v_woken integer;
  v_live text[] := '{queued,running}';
begin
  perform set_config('ordo.notify_after_commit', 'on', true);
  v_c := array(
    select row(c.tenant_id, c.run_id, c.step_id, c.attempt, c.epoch, c.outputs, c.outputs_hash, c.logs_hash, c.started_at,
      c.finished_at, c.ord, c.status, case when c.status = 'succeeded' then 'succeeded' end, c.error,
      coalesce(c.actor, v_worker), c.named_status)::ordo_adv_result
    from jsonb_to_recordset(p->'results')
      as c(tenant_id text, run_id uuid, step_id text, attempt integer, epoch integer, status text, outputs jsonb,
        outputs_hash text, logs_hash text, error jsonb, started_at timestamptz, finished_at timestamptz, actor text, ord integer,
        named_status text)
  );

  -- The runs, locked in key order.
  perform 1 from run x
  where (x.tenant_id, x.run_id) in (select c.tenant_id, c.run_id from unnest(v_c) c)
  order by x.tenant_id, x.run_id
  for update of x;

  -- Successes whose step still runs at the reported epoch: the common case, applied at once (the
  -- error of an earlier attempt stays on that attempt only).
  with u as (
    update step s set status = 'succeeded', outputs = coalesce(c.outputs, s.outputs), outputs_hash = c.outputs_hash,
      logs_hash = coalesce(c.logs_hash, s.logs_hash), named_status = c.named_status, error = null, finished_at = now()
    from unnest(v_c) c
    where s.tenant_id = c.tenant_id and s.run_id = c.run_id and s.step_id = c.step_id and c.status = 'succeeded'
      and s.status = 'running' and s.epoch = c.epoch
    returning s.tenant_id, s.run_id, s.step_id
  )
  select coalesce(array_agg(row(u.tenant_id, u.run_id, u.step_id)::ordo_step_key), '{}') into v_ok from u;
  v_all_succeeded := cardinality(v_ok) = cardinality(v_c);

  if not v_all_succeeded then
    -- Each other result's outcome. A result is current while its step runs at the reported epoch.
    v_c := array(
      select row(c.tenant_id, c.run_id, c.step_id, c.attempt, c.epoch, c.outputs, c.outputs_hash, c.logs_hash, c.started_at,
        c.finished_at, c.ord, c.status,
        case
          when c.status = 'succeeded' and exists (
            select 1 from unnest(v_ok) o where o.tenant_id = c.tenant_id and o.run_id = c.run_id and o.step_id = c.step_id
          ) then 'succeeded'
          when s.step_id is null then 'dropped'
          when c.status = 'orphaned' then
            case when cur and exists (
              select 1 from queue_item q
              where q.tenant_id = c.tenant_id and q.run_id = c.run_id and q.step_id = c.step_id and q.epoch = c.epoch
                and q.lease_expires_at < now()
            ) then 'orphaned' else 'dropped' end
          when cur and c.status = 'failed' then 'failed'
          when cur and c.status = 'skipped' then 'skipped'
          when cur and c.status = 'waiting' then 'waiting'
          when cur and c.status = 'aborted' and x.status in ('queued', 'running') then 'failed'
          when cur and c.status = 'aborted' then 'cancelled'
          when s.status = 'cancelled' then 'cancelled'
          else 'rejected'
        end,
        case
          when c.status = 'orphaned' then '{"code":"LEASE_EXPIRED","message":"the worker stopped heartbeating","retryable":true}'::jsonb
          when c.status = 'aborted' and cur and x.status in ('queued', 'running') then
            '{"code":"ABORTED","message":"the attempt was stopped before it finished","retryable":true}'::jsonb
          else c.error
        end,
        c.actor, c.named_status)::ordo_adv_result
      from unnest(v_c) c
      join run x on x.tenant_id = c.tenant_id and x.run_id = c.run_id
      left join step s on s.tenant_id = c.tenant_id and s.run_id = c.run_id and s.step_id = c.step_id
      cross join lateral (select s.status = 'running' and s.epoch = c.epoch as cur) k
      order by c.ord
    );
  end if;

  update attempt a set status = case c.outcome when 'succeeded' then 'succeeded' when 'orphaned' then 'orphaned'
      when 'failed' then 'failed' when 'skipped' then 'skipped' else 'cancelled' end,
    error = case when c.outcome in ('succeeded', 'skipped') then null else c.error end,
    outputs_hash = case when c.outcome = 'succeeded' then c.outputs_hash end,
    logs_hash = case when c.outcome in ('succeeded', 'failed', 'orphaned') then c.logs_hash end,
    started_at = coalesce(c.started_at, a.started_at), finished_at = coalesce(c.finished_at, a.finished_at), terminated_at = now()
  from unnest(v_c) c
  where a.tenant_id = c.tenant_id and a.run_id = c.run_id and a.step_id = c.step_id and a.attempt = c.attempt
    and a.epoch = c.epoch and a.status = 'running' and c.outcome not in ('dropped', 'waiting');

  insert into artifact (tenant_id, sha256, media_type, size, body_json)
  select a.tenant_id, a.sha256, a.media_type, octet_length(a.body), a.body::jsonb
  from jsonb_to_recordset(p->'artifacts') as a(tenant_id text, sha256 text, media_type text, body text)
  where exists (
    select 1 from unnest(v_c) c
    where c.tenant_id = a.tenant_id and (
      (c.outcome = 'succeeded' and a.sha256 in (c.outputs_hash, c.logs_hash))
      or (c.outcome in ('failed', 'orphaned') and a.sha256 = c.logs_hash))
  )
  on conflict do nothing;

  -- The results' queue items leave the queue (counted per tenant: their slots are free).
  with rl as (
    delete from queue_item q using unnest(v_c) c
    -- (An item with an epoch is leased: ready items have none. Not naming the state keeps the
    -- partial index of leases, which has no key columns, out of this plan.)
    where q.tenant_id = c.tenant_id and q.run_id = c.run_id and q.step_id = c.step_id and q.epoch = c.epoch
      and (c.status <> 'orphaned' or q.lease_expires_at < now())
    returning q.tenant_id
  )
  select coalesce(jsonb_object_agg(x.tenant_id, x.n), '{}') into v_rel
  from (select rl.tenant_id, count(*)::integer as n from rl group by rl.tenant_id) x;

  if not v_all_succeeded then
    -- Failures: an expired lease first orphans its step; then each is retried or fails.
    update step s set status = 'orphaned', error = c.error
    from unnest(v_c) c
    where s.tenant_id = c.tenant_id and s.run_id = c.run_id and s.step_id = c.step_id and c.outcome = 'orphaned'
      and s.status = 'running' and s.epoch = c.epoch;
    v_c := array(
      select row(c.tenant_id, c.run_id, c.step_id, c.attempt, c.epoch, c.outputs, c.outputs_hash, c.logs_hash, c.started_at,
        c.finished_at, c.ord, c.status,
        case
          when c.outcome not in ('failed', 'orphaned') then c.outcome
          when coalesce((c.error->>'retryable')::boolean, false) and jsonb_typeof(s.spec->'retry') = 'object'
            and c.attempt - 1 < (s.spec->'retry'->>'maxRetries')::integer and x.status in ('queued', 'running')
            then c.outcome || '>retrying'
          else c.outcome || '>failed'
        end,
        c.error, c.actor, c.named_status)::ordo_adv_result
      from unnest(v_c) c
      join run x on x.tenant_id = c.tenant_id and x.run_id = c.run_id
      left join step s on s.tenant_id = c.tenant_id and s.run_id = c.run_id and s.step_id = c.step_id
      order by c.ord
    );
    update step s set status = split_part(c.outcome, '>', 2), error = c.error,
      reason = case when c.outcome like '%>failed' then c.error->>'code' else s.reason end,
      finished_at = case when c.outcome like '%>failed' then now() else s.finished_at end
    from unnest(v_c) c
    where s.tenant_id = c.tenant_id and s.run_id = c.run_id and s.step_id = c.step_id and c.outcome like '%>%'
      and s.status in ('running', 'orphaned') and s.epoch = c.epoch;
    perform graphile_worker.add_job('ordo.engine.retry_step',
      json_build_object('tenantId', c.tenant_id, 'runId', c.run_id, 'stepId', c.step_id, 'attempt', c.attempt),
      run_at => now() + make_interval(secs => ordo_backoff_ms(s.spec->'retry', c.attempt)::numeric / 1000),
      job_key => 'retry:' || c.tenant_id || ':' || c.run_id || ':' || c.step_id || ':' || c.attempt,
      max_attempts => 25)
    from unnest(v_c) c join step s on s.tenant_id = c.tenant_id and s.run_id = c.run_id and s.step_id = c.step_id
    where c.outcome like '%>retrying';

    -- A step handed back as waiting waits for a decision, holding no slot and no lease (its attempt
    -- stays open); its timeout, when it has one, is a job.
    update step s set status = 'waiting'
    from unnest(v_c) c
    where s.tenant_id = c.tenant_id and s.run_id = c.run_id and s.step_id = c.step_id and c.outcome = 'waiting'
      and s.status = 'running' and s.epoch = c.epoch;
    perform graphile_worker.add_job('ordo.engine.step_timeout',
      json_build_object('tenantId', c.tenant_id, 'runId', c.run_id, 'stepId', c.step_id, 'epoch', c.epoch),
      run_at => now() + make_interval(secs => (c.error->>'timeoutMs')::numeric / 1000),
      job_key => 'timeout:' || c.tenant_id || ':' || c.run_id || ':' || c.step_id || ':' || c.epoch,
      max_attempts => 25)
    from unnest(v_c) c
    where c.outcome = 'waiting' and c.error ? 'timeoutMs';
    -- A map step handed back as waiting with its elements fans out to its instances (ordo_map_expand).
    if p ? 'maps' then
      v_e := v_e || ordo_map_expand(p->'maps', v_c);
    end if;
    -- A queue step handed back as waiting with its task hands the task to its pool (ordo_task_open).
    if p ? 'tasks' then
      perform ordo_task_open(p->'tasks', v_c);
    end if;
    -- A signal step's wait is matched with the signals kept for its key, or registered for the next
    -- one, by a job (under the key's lock; see SignalsService).
    perform graphile_worker.add_job('ordo.engine.signal_wait',
      json_build_object('tenantId', c.tenant_id, 'runId', c.run_id, 'stepId', c.step_id, 'epoch', c.epoch,
        'name', c.error->>'name', 'correlationKey', c.error->>'correlationKey'),
      job_key => 'signal:' || c.tenant_id || ':' || c.run_id || ':' || c.step_id || ':' || c.epoch,
      max_attempts => 25)
    from unnest(v_c) c
    where c.outcome = 'waiting' and c.error->>'kind' = 'signal';
    -- A step whose preconditions do not hold waits for them (its attempt's ConditionPending phase,
    -- from its first check that did not hold), checked again by a job (checkEveryMs).
    update attempt a set condition_pending_at = coalesce(a.condition_pending_at, now())
    from unnest(v_c) c
    where a.tenant_id = c.tenant_id and a.run_id = c.run_id and a.step_id = c.step_id and a.attempt = c.attempt
      and a.epoch = c.epoch and a.status = 'running' and c.outcome = 'waiting' and c.error->>'kind' = 'precondition';
    perform graphile_worker.add_job('ordo.engine.precondition_check',
      json_build_object('tenantId', c.tenant_id, 'runId', c.run_id, 'stepId', c.step_id, 'epoch', c.epoch, 'check', 1),
      run_at => now() + make_interval(secs => (c.error->>'checkEveryMs')::numeric / 1000),
      job_key => 'precondition:' || c.tenant_id || ':' || c.run_id || ':' || c.step_id || ':' || c.epoch || ':1',
      max_attempts => 25)
    from unnest(v_c) c
    where c.outcome = 'waiting' and c.error->>'kind' = 'precondition';
    -- A `dag` step whose child run ended before the step began to wait is resumed at once.
    perform graphile_worker.add_job('ordo.engine.child_ended',
      json_build_object('tenantId', c.tenant_id, 'runId', c.run_id, 'stepId', c.step_id, 'childRunId', x.run_id),
      job_key => 'child:' || c.tenant_id || ':' || x.run_id, max_attempts => 25)
    from unnest(v_c) c
    join run x on x.tenant_id = c.tenant_id and x.run_id = (c.error->>'childRunId')::uuid
    where c.outcome = 'waiting' and c.error->>'kind' = 'dag' and x.status in ('succeeded', 'failed', 'cancelled');

    -- A step that ends skipped (its condition was false, a constraint's skip action) says why.
    update step s set status = 'skipped', reason = c.error->>'reason', finished_at = now()
    from unnest(v_c) c
    where s.tenant_id = c.tenant_id and s.run_id = c.run_id and s.step_id = c.step_id and c.outcome = 'skipped'
      and s.status = 'running' and s.epoch = c.epoch;

    -- A step that ends failed with an invalid_input error, or with a permanent one (not retryable)
    -- when it has failRun, fails its run at once (the first such step of the run in this batch names
    -- it): the run's other unfinished steps are cancelled, as a cancel does (a waiting step's open
    -- attempt ends with it, ready queue items leave, workers running one are told to stop and their
    -- results are only recorded), and the run ends failed below.
    v_ff := array(
      select distinct on (c.tenant_id, c.run_id) row(c.tenant_id, c.run_id, c.step_id)::ordo_step_key
      from unnest(v_c) c
      join step s on s.tenant_id = c.tenant_id and s.run_id = c.run_id and s.step_id = c.step_id
      where c.outcome like '%>failed' and (c.error->>'class' = 'invalid_input'
        or (s.spec ? 'failRun' and not coalesce((c.error->>'retryable')::boolean, false)))
      order by c.tenant_id, c.run_id, c.ord
    );
    if cardinality(v_ff) > 0 then
      with x as (
        update step s set status = 'cancelled', reason = 'run_failed', finished_at = now()
        from step o, unnest(v_ff) f
        where s.tenant_id = f.tenant_id and s.run_id = f.run_id
          and o.tenant_id = s.tenant_id and o.run_id = s.run_id and o.step_id = s.step_id
          and s.status in ('pending', 'queued', 'running', 'waiting', 'retrying', 'orphaned')
        returning s.tenant_id, s.run_id, s.step_id, s.epoch, s.topo_index, o.status as old
      ),
      a as (
        update attempt a set status = 'cancelled', terminated_at = now()
        from x
        where a.tenant_id = x.tenant_id and a.run_id = x.run_id and a.step_id = x.step_id
          and a.epoch = x.epoch and a.status = 'running' and x.old = 'waiting'
      ),
      q as (
        delete from queue_item q using x
        where q.tenant_id = x.tenant_id and q.run_id = x.run_id and q.step_id = x.step_id and q.state = 'ready'
      )
      -- (Each cancelled step with the state it left, in the reason field.)
      select coalesce(array_agg(row(x.tenant_id, x.run_id, x.step_id, x.old)::ordo_adv_skip
        order by x.tenant_id, x.run_id, x.topo_index, x.step_id), '{}')
      into v_ffc from x;
      perform ordo_notify('ordo_cancel', f.run_id::text) from unnest(v_ff) f;
    end if;
  end if;

  -- The steps that ended count on their pending dependents, in waves: each dependent's trigger rule
  -- (ordo_trigger_decision) makes it wait, ready (queued; or, when disabled, skipped and counted as
  -- succeeded for its own dependents) or skipped, and what it skipped counts on its own dependents
  -- in the next wave (as failed when something upstream failed).
  v_done := array(
    select row(c.tenant_id, c.run_id, c.step_id)::ordo_step_key from unnest(v_c) c where c.outcome = 'succeeded'
  );
  v_dfail := array(
    select row(c.tenant_id, c.run_id, c.step_id)::ordo_step_key from unnest(v_c) c where c.outcome like '%>failed'
  );
  v_dskip := array(
    select row(c.tenant_id, c.run_id, c.step_id)::ordo_step_key from unnest(v_c) c where c.outcome = 'skipped'
  );
  while cardinality(v_done) + cardinality(v_dfail) + cardinality(v_dskip) > 0 loop
    with e as (
      select k.tenant_id, k.run_id, k.step_id, 0 as f, 0 as k from unnest(v_done) k
      union all
      select k.tenant_id, k.run_id, k.step_id, 1, 0 from unnest(v_dfail) k
      union all
      select k.tenant_id, k.run_id, k.step_id, 0, 1 from unnest(v_dskip) k
    ),
    -- (A success counts as skipped on a dependent that needs another named status of that step.)
    ek as (
      select s.tenant_id, s.run_id, s.step_id, e.f,
        case when e.f = 1 or e.k = 1 then e.k
          when not coalesce(s.spec->'onStatus' ? e.step_id, false) then 0
          when (select u.named_status from step u
                where u.tenant_id = e.tenant_id and u.run_id = e.run_id and u.step_id = e.step_id)
            is not distinct from s.spec->'onStatus'->>e.step_id then 0
          else 1 end as k
      from e
      join step s on s.tenant_id = e.tenant_id and s.run_id = e.run_id and e.step_id = any(s.depends_on)
      where s.status = 'pending'
    ),
    d as (
      select s.tenant_id, s.run_id, s.step_id, count(*)::integer as n, sum(e.f)::integer as nf, sum(e.k)::integer as nk,
        ordo_trigger_decision(s.spec->>'trigger', cardinality(s.depends_on), s.pending_deps - count(*)::integer,
          s.deps_failed + sum(e.f)::integer, s.deps_skipped + sum(e.k)::integer) as decision,
        coalesce((s.spec->>'disabled')::boolean, false) as disabled
      from ek e
      join step s on s.tenant_id = e.tenant_id and s.run_id = e.run_id and s.step_id = e.step_id
      group by s.tenant_id, s.run_id, s.step_id
    ),
    u as (
      update step s set pending_deps = s.pending_deps - d.n, deps_failed = s.deps_failed + d.nf,
        deps_skipped = s.deps_skipped + d.nk,
        status = case when d.decision = 'wait' then s.status when d.decision = 'ready' and not d.disabled then 'queued'
          else 'skipped' end,
        reason = case when d.decision = 'wait' then s.reason when d.decision = 'ready' and d.disabled then 'disabled'
          when d.decision = 'ready' then s.reason else d.decision end,
        finished_at = case when d.decision = 'wait' or (d.decision = 'ready' and not d.disabled) then s.finished_at
          else now() end,
        queued_at = case when d.decision = 'ready' then now() else s.queued_at end
      from d where s.tenant_id = d.tenant_id and s.run_id = d.run_id and s.step_id = d.step_id
      returning s.tenant_id, s.run_id, s.step_id, s.topo_index, s.status, s.reason, d.decision,
        s.spec->>'concurrency' is null and (v_only is null or s.plugin = v_only) as claimable
    )
    select coalesce(array_agg(row(u.tenant_id, u.run_id, u.step_id, u.topo_index, u.claimable)::ordo_adv_ready
        order by u.tenant_id, u.run_id, u.topo_index, u.step_id) filter (where u.status = 'queued'), '{}'),
      coalesce(array_agg(row(u.tenant_id, u.run_id, u.step_id)::ordo_step_key
        order by u.tenant_id, u.run_id, u.topo_index, u.step_id) filter (where u.reason = 'disabled'), '{}'),
      coalesce(array_agg(row(u.tenant_id, u.run_id, u.step_id)::ordo_step_key)
        filter (where u.reason = 'upstream_failed'), '{}'),
      coalesce(array_agg(row(u.tenant_id, u.run_id, u.step_id)::ordo_step_key)
        filter (where u.status = 'skipped' and u.reason not in ('disabled', 'upstream_failed')), '{}'),
      coalesce(array_agg(row(u.tenant_id, u.run_id, u.step_id, u.reason)::ordo_adv_skip
        order by u.tenant_id, u.run_id, u.topo_index, u.step_id) filter (where u.status = 'skipped'), '{}')
    into v_wave_ready, v_done, v_dfail, v_dskip, v_wave_skipped
    from u where u.decision <> 'wait';
    v_e := v_e || array(
      select row(k.tenant_id, k.run_id, 1000000 + v_wave * 100000 + n::integer, 'step.skipped', k.step_id, null, 'engine',
        '{"reason":' || to_json(k.reason)::text || '}')::ordo_adv_event
      from unnest(v_wave_skipped) with ordinality as k(tenant_id, run_id, step_id, reason, n)
    ) || array(
      select row(x.tenant_id, x.run_id, 1050000 + v_wave * 100000 + n::integer, 'step.queued', x.step_id, null, 'engine',
        '{}')::ordo_adv_event
      from unnest(v_wave_ready) with ordinality as x(tenant_id, run_id, step_id, topo_index, claim, n)
    );
    v_skipped := v_skipped || array(select row(k.tenant_id, k.run_id, k.step_id)::ordo_step_key from unnest(v_wave_skipped) k);
    v_ready := v_ready || v_wave_ready;
    v_wave := v_wave + 1;
  end loop;

  if cardinality(v_ready) > 0 then
    -- Which ready successors go to this worker: while it has room (topological order, ties by step
    -- id), and per tenant as many as its results freed, more only under the tenant's in-flight cap
    -- (its leased items, these results' released, counted up to the cap). A gated step (claim false
    -- here) goes to the queue, where the claim takes it under its gate. Steps handed over with
    -- `only` take no lease (the caller hands them back before its commit): the cap of leased steps
    -- does not count them, and only the room does.
    v_ready := array(
      select row(x.tenant_id, x.run_id, x.step_id, x.topo_index,
        x.claim and x.n_all <= v_capacity
          and (v_only is not null
            or x.n_tenant <= case when x.want <= x.rel and f.used + x.rel <= f.cap then x.want else greatest(0, f.cap - f.used) end)
      )::ordo_adv_ready
      from (
        select x.*,
          count(*) filter (where x.claim) over (order by x.tenant_id, x.run_id, x.topo_index, x.step_id) as n_all,
          count(*) filter (where x.claim) over (partition by x.tenant_id order by x.run_id, x.topo_index, x.step_id) as n_tenant,
          count(*) filter (where x.claim) over (partition by x.tenant_id) as want,
          coalesce((v_rel->>x.tenant_id)::integer, 0) as rel
        from unnest(v_ready) x
      ) x
      left join (
        select w.tenant_id, w.cap, (
          select count(*)::integer from (select 1 from queue_item l where l.tenant_id = w.tenant_id and l.state = 'leased' limit w.cap) l
        ) as used
        from (
          select d.tenant_id, ordo_in_flight_cap(tq.max_in_flight, tq.weight, p) as cap
          -- (With `only` the cap does not apply: no tenant's leases are counted.)
          from (select distinct x.tenant_id from unnest(v_ready) x where v_only is null) d
          left join tenant_queue tq on tq.tenant_id = d.tenant_id
        ) w
      ) f on f.tenant_id = x.tenant_id
      order by x.tenant_id, x.run_id, x.topo_index, x.step_id
    );

    -- Ready successors go to this worker while it has room and the tenant is under its in-flight cap;
    -- the rest wait in the queue.
    with c as (
      select x.tenant_id, x.run_id, x.step_id,
        r.dispatch_count + row_number() over (partition by x.tenant_id, x.run_id order by x.topo_index, x.step_id) as seq,
        row_number() over (order by x.tenant_id, x.run_id, x.topo_index, x.step_id) as k
      from unnest(v_ready) x join run r on r.tenant_id = x.tenant_id and r.run_id = x.run_id
      where x.claim
    ),
    d as (
      update step s set status = 'running', epoch = s.epoch + 1, attempts = s.attempts + 1,
        dispatch_seq = coalesce(s.dispatch_seq, c.seq::integer), started_at = coalesce(s.started_at, now())
      from c
      where s.tenant_id = c.tenant_id and s.run_id = c.run_id and s.step_id = c.step_id and s.status = 'queued'
      returning s.tenant_id, s.run_id, s.step_id, s.epoch, s.attempts, s.plugin, s.config, s.spec, s.depends_on, s.queued_at,
        c.seq::integer as dispatch_seq, c.k
    ),
    t as (
      select d.*, r.dag_id, r.dag_version, r.trace_id,
        '00-' || r.trace_id || '-' || substr(md5(gen_random_uuid()::text), 1, 16) || '-01' as traceparent
      from d join run r on r.tenant_id = d.tenant_id and r.run_id = d.run_id
    ),
    -- (With `only`, the caller hands the steps back in this transaction: a lease would be inserted
    -- and deleted unseen, so they take none.)
    l as (
      insert into queue_item (tenant_id, run_id, step_id, state, worker_id, epoch, lease_expires_at)
      select t.tenant_id, t.run_id, t.step_id, 'leased', v_worker, t.epoch, now() + v_lease from t
      where v_only is null
      returning 1
    ),
    a as (
      insert into attempt (tenant_id, run_id, step_id, attempt, epoch, worker_id, lease_expires_at, traceparent, queued_at,
        claimed_at, constraint_checked_at)
      select t.tenant_id, t.run_id, t.step_id, t.attempts, t.epoch, v_worker, now() + v_lease, t.traceparent,
        coalesce(t.queued_at, now()), now(), now()
      from t
      returning 1
    )
    select coalesce(array_agg(to_jsonb(t) order by t.k), '{}'), (select count(*) from unnest(v_ready) x where x.claim)::integer
    into v_d, v_claim
    from t;
    if cardinality(v_d) <> v_claim then
      raise exception 'a ready step could not be dispatched';
    end if;

    -- Steps left for the queue (a gated one under its gate), and the workers woken for them.
    with q as (
      insert into queue_item (tenant_id, run_id, step_id, gate, gate_limit, priority)
      select x.tenant_id, x.run_id, x.step_id,
        ordo_step_gate(r.dag_id, x.step_id, s.spec), (s.spec->>'concurrency')::integer,
        coalesce((s.spec->>'priority')::smallint, 5)
      from unnest(v_ready) x
      join step s on s.tenant_id = x.tenant_id and s.run_id = x.run_id and s.step_id = x.step_id
      join run r on r.tenant_id = x.tenant_id and r.run_id = x.run_id
      where not x.claim
      order by x.tenant_id, x.run_id, x.topo_index, x.step_id
      returning tenant_id
    )
    select count(*) into v_woken from (select ordo_notify('ordo_ready', n.tenant_id) from (select distinct q.tenant_id from q) n) z;
  end if;

  -- Slots these results freed and no successor took: a tenant with ready steps wakes the workers
  -- (a claim may have passed it over at its cap).
  perform ordo_notify('ordo_ready', f.key)
  from jsonb_each_text(v_rel) f
  where f.value::integer > (select count(*) from unnest(v_ready) x where x.tenant_id = f.key and x.claim)
    and exists (select 1 from queue_item q where q.tenant_id = f.key and q.state = 'ready');

  -- Runs with no step left end here (failed if any of their steps failed), each with the hash of
  -- its steps' outputs; runs waiting for a slot of their DAGs are admitted.
  v_ending := array(
    select row(x.tenant_id, x.run_id, x.dag_id,
      case when x.steps_failed + k.failed > 0 then 'run.failed' else 'run.succeeded' end)::ordo_adv_ending
    from run x join (
      select k.tenant_id, k.run_id, sum(k.done)::integer as done, sum(k.failed)::integer as failed
      from (
        select c.tenant_id, c.run_id, 1 as done, (c.outcome like '%>failed')::integer as failed
        from unnest(v_c) c where c.outcome in ('succeeded', 'skipped') or c.outcome like '%>failed'
        union all
        select s.tenant_id, s.run_id, 1, 0 from unnest(v_skipped) s
      ) k group by k.tenant_id, k.run_id
    ) k on k.tenant_id = x.tenant_id and x.run_id = k.run_id
    where (x.steps_remaining - k.done <= 0
        or (x.tenant_id, x.run_id) in (select f.tenant_id, f.run_id from unnest(v_ff) f))
      -- (The live states as a variable: a generic plan cannot prove the partial index of active
      -- runs applies, and reaches each run by its key, however many runs are active.)
      and x.status = any (v_live)
    order by x.tenant_id, x.run_id
  );
  if cardinality(v_ending) > 0 then
    v_admitted := ordo_admit_waiting(v_ending, v_now);
    -- A child run of a `dag` step that ends resumes its parent's step (ordo.engine.child_ended).
    perform graphile_worker.add_job('ordo.engine.child_ended',
      json_build_object('tenantId', x.tenant_id, 'runId', x.parent_run_id, 'stepId', x.parent_step_id,
        'childRunId', x.run_id),
      job_key => 'child:' || x.tenant_id || ':' || x.run_id, max_attempts => 25)
    from unnest(v_ending) e join run x on x.tenant_id = e.tenant_id and x.run_id = e.run_id
    where x.parent_run_id is not null;
    -- A run that ends failed, of a DAG with onFailure: deadletter, enters its tenant's dead-letter.
    with i as (
      insert into dead_letter (tenant_id, run_id, dag_id, dag_version, created_at)
      select r.tenant_id, r.run_id, x.dag_id, x.dag_version, v_now
      from unnest(v_ending) r
      join run x on x.tenant_id = r.tenant_id and x.run_id = r.run_id
      join dag_version dv on dv.tenant_id = x.tenant_id and dv.dag_id = x.dag_id and dv.version = x.dag_version
      where r.type = 'run.failed' and dv.definition->>'onFailure' = 'deadletter'
      on conflict do nothing
      returning tenant_id, run_id
    )
    select coalesce(array_agg(row(i.tenant_id, i.run_id, null)::ordo_step_key), '{}') into v_dl from i;
  end if;

  -- The events, in the order they happened: each result's, the steps skipped (collected above),
  -- successors queued, successors dispatched, run ends.
  v_e := v_e || array(
    select row(c.tenant_id, c.run_id, c.ord * 4, 'step.result_rejected', c.step_id, c.attempt, c.actor,
      '{"currentEpoch":' || s.epoch || ',"epoch":' || c.epoch || ',"reported":' || to_json(c.status)::text
        || ',"stepStatus":' || to_json(s.status)::text || '}')::ordo_adv_event
    from unnest(v_c) c join step s on s.tenant_id = c.tenant_id and s.run_id = c.run_id and s.step_id = c.step_id
    where c.outcome = 'rejected'
    union all
    select row(c.tenant_id, c.run_id, c.ord * 4 + 1, 'step.succeeded', c.step_id, c.attempt, c.actor,
      '{"outputsHash":' || to_json(c.outputs_hash)::text || coalesce(',"status":' || to_json(c.named_status)::text, '')
        || '}')::ordo_adv_event
    from unnest(v_c) c where c.outcome = 'succeeded'
    union all
    -- (Its data, why it was skipped or what it waits for, is a flat object of strings, integers and
    -- booleans: canonical JSON is its members in key order.)
    select row(c.tenant_id, c.run_id, c.ord * 4 + 1, 'step.' || c.outcome, c.step_id, c.attempt, c.actor,
      (select '{' || string_agg(to_json(x.k)::text || ':' || x.v::text, ',' order by convert_to(x.k, 'UTF8')) || '}'
        from jsonb_each(c.error) as x(k, v)))::ordo_adv_event
    from unnest(v_c) c where c.outcome in ('skipped', 'waiting')
    union all
    select row(c.tenant_id, c.run_id, c.ord * 4 + 1, 'step.orphaned', c.step_id, c.attempt, c.actor,
      '{"epoch":' || c.epoch || '}')::ordo_adv_event
    from unnest(v_c) c where c.outcome like 'orphaned>%'
    union all
    select row(c.tenant_id, c.run_id, c.ord * 4 + 2, 'step.retrying', c.step_id, c.attempt, 'engine',
      '{"error":' || ordo_error_json(c.error) || ',"nextAttempt":' || (c.attempt + 1)
        || ',"retryInMs":' || ordo_backoff_ms(s.spec->'retry', c.attempt) || '}')::ordo_adv_event
    from unnest(v_c) c join step s on s.tenant_id = c.tenant_id and s.run_id = c.run_id and s.step_id = c.step_id
    where c.outcome like '%>retrying'
    union all
    select row(c.tenant_id, c.run_id, c.ord * 4 + 2, 'step.failed', c.step_id, c.attempt, 'engine',
      '{"error":' || ordo_error_json(c.error) || '}')::ordo_adv_event
    from unnest(v_c) c where c.outcome like '%>failed'
    union all
    select row((x->>'tenant_id'), (x->>'run_id')::uuid, 2000000 + (x->>'k')::integer, 'step.running', x->>'step_id',
      (x->>'attempts')::integer, v_worker,
      '{"dispatchSeq":' || (x->>'dispatch_seq') || ',"epoch":' || (x->>'epoch') || '}')::ordo_adv_event
    from unnest(v_d) x
    union all
    select row(k.tenant_id, k.run_id, 2900000 + n::integer, 'step.cancelled', k.step_id, null, 'engine',
      '{"from":' || to_json(k.reason)::text || ',"reason":"run_failed"}')::ordo_adv_event
    from unnest(v_ffc) with ordinality as k(tenant_id, run_id, step_id, reason, n)
    union all
    -- (A run failed at once names the step that failed it.)
    select row(r.tenant_id, r.run_id, 3000000, r.type, null, null, 'engine',
      '{' || coalesce('"failedBy":' || to_json(f.step_id)::text || ',', '')
        || '"outputsHash":' || to_json(ordo_run_outputs_hash(r.tenant_id, r.run_id))::text || '}')::ordo_adv_event
    from unnest(v_ending) r left join unnest(v_ff) f on f.tenant_id = r.tenant_id and f.run_id = r.run_id
    union all
    select row(k.tenant_id, k.run_id, 3000001, 'run.deadlettered', null, null, 'engine', '{}')::ordo_adv_event
    from unnest(v_dl) k
  );

  -- Events numbered after each run's last one, chained and appended, in the order they happened.
  v_ch := ordo_append_events(v_e, v_now);

  -- The runs' bookkeeping.
  with last as (select * from ordo_event_heads(v_ch)),
  fin as (
    select e.tenant_id, e.run_id, e.type, e.data from unnest(v_ch) e where e.type in ('run.succeeded', 'run.failed')
  ),
  disp as (
    select x.tenant_id, x.run_id, count(*)::integer as n from unnest(v_ready) x where x.claim group by x.tenant_id, x.run_id
  ),
  res as (
    select k.tenant_id, k.run_id, sum(k.done)::integer as done, sum(k.failed)::integer as failed
    from (
      select c.tenant_id, c.run_id, 1 as done, (c.outcome like '%>failed')::integer as failed
      from unnest(v_c) c where c.outcome in ('succeeded', 'skipped') or c.outcome like '%>failed'
      union all
      select s.tenant_id, s.run_id, 1, 0 from unnest(v_skipped) s
    ) k group by k.tenant_id, k.run_id
  ),
  upd as (
    update run x set event_seq = last.seq, event_hash = last.hash,
      dispatch_count = x.dispatch_count + coalesce(disp.n, 0),
      steps_remaining = case when ff.run_id is null then x.steps_remaining - coalesce(res.done, 0) else 0 end,
      steps_failed = x.steps_failed + coalesce(res.failed, 0),
      status = case when fin.type is null then x.status else substr(fin.type, 5) end,
      finished_at = case when fin.type is null then x.finished_at else coalesce(x.finished_at, now()) end,
      outputs_hash = case when fin.type is null then x.outputs_hash else (fin.data::jsonb)->>'outputsHash' end
    from last
    left join fin on fin.tenant_id = last.tenant_id and fin.run_id = last.run_id
    left join disp on disp.tenant_id = last.tenant_id and disp.run_id = last.run_id
    left join res on res.tenant_id = last.tenant_id and res.run_id = last.run_id
    left join unnest(v_ff) ff on ff.tenant_id = last.tenant_id and ff.run_id = last.run_id
    where x.tenant_id = last.tenant_id and x.run_id = last.run_id
    returning x.run_id, fin.type is not null as ended
  )
  select array_agg(upd.run_id) into v_ended from upd where upd.ended;

  -- Map instances that ended count down their map steps, and a map step with none left ends
  -- (ordo_map_join, after everything above).
  if exists (select 1 from unnest(v_c) c where right(c.step_id, 1) = ']') then
    return query select j.kind, j.item from ordo_map_join(v_c) j;
  end if;

  if v_ended is null and cardinality(v_admitted) = 0
    and not exists (select 1 from unnest(v_c) c where c.outcome like '%>retrying') then
    return query
      select 'dispatch'::text, x - 'k' from unnest(v_d) x
      union all
      select 'notify'::text, x from ordo_take_notifications() x;
    return;
  end if;
  perform ordo_notify('ordo_run_finished', id::text) from unnest(v_ended) id;
  return query
    select 'dispatch'::text, x - 'k' from unnest(v_d) x
    union all
    select 'event'::text, x from ordo_events_out(v_ch || v_admitted, v_now) x
    union all
    select 'notify'::text, x from ordo_take_notifications() x;
end
$$;

revoke all on function ordo_engine_advance(p jsonb) from public;
grant all on function ordo_engine_advance(p jsonb) to ordo_system;
