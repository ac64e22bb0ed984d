-- The engine's hop in one statement and one commit: applies a batch of successful results, makes
-- their successors ready and dispatches them to the reporting worker (up to its capacity, under the
-- tenant cap), queues the rest, ends the runs with no step left, with the same rows, transitions (the
-- triggers check them again) and hash-chained events as the general engine transaction.
--
-- Anything out of the common case raises SQLSTATE OR001 before it is committed (the whole statement
-- rolls back) and the caller applies the batch through the general transaction: a result that is not
-- current (fenced out, cancelled run), a successor that is disabled, a run that ends while runs of
-- its DAG wait for a maxConcurrentRuns slot.

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
  v_cap integer := (p->>'cap')::integer;
  v_c ordo_adv_result[];
  v_e ordo_adv_event[];
  v_ready ordo_adv_ready[];
  v_ch ordo_adv_chained[];
  v_d jsonb[] := '{}';
  v_ended uuid[];
  v_ending ordo_adv_ending[] := '{}';
  v_disabled boolean;
  v_woken integer;
  v_rel jsonb;
  v_n integer;
  v_done integer;
  v_runs integer;
  v_running integer;
  v_wanted integer;
  v_claim integer := 0;
begin
  perform set_config('ordo.notify_after_commit', 'on', true);
  v_c := array(
    select row(c.t, c.r, c.s, c.a, c.e, c.o, c.oh, c.lh, c.sa, c.fa, c.ord)::ordo_adv_result
    from jsonb_to_recordset(p->'completions')
      as c(t text, r uuid, s text, a integer, e integer, o jsonb, oh text, lh text, sa timestamptz, fa timestamptz, ord integer)
  );
  v_n := cardinality(v_c);

  -- The runs, locked in key order (as every engine transaction locks them): all must be running.
  select count(*)::integer, (count(*) filter (where x.status = 'running'))::integer,
    (select count(*) from (select distinct c.tenant_id, c.run_id from unnest(v_c) c) c)::integer
  into v_runs, v_running, v_wanted
  from (
    select x.status from run x
    where (x.tenant_id, x.run_id) in (select c.tenant_id, c.run_id from unnest(v_c) c)
    order by x.tenant_id, x.run_id
    for update of x
  ) x;
  if v_running <> v_wanted or v_runs <> v_wanted then
    raise exception using errcode = 'OR001', message = 'a run of the batch is not running';
  end if;

  -- The results: each step must still be running at the reported epoch.
  update step s set status = 'succeeded', outputs = coalesce(c.outputs, s.outputs), outputs_hash = c.outputs_hash,
    logs_hash = coalesce(c.logs_hash, s.logs_hash), finished_at = now()
  from unnest(v_c) c
  where s.tenant_id = c.tenant_id and s.run_id = c.run_id and s.step_id = c.step_id
    and s.status = 'running' and s.epoch = c.epoch;
  get diagnostics v_done = row_count;
  if v_done <> v_n then
    raise exception using errcode = 'OR001', message = 'a result of the batch is not current';
  end if;
  update attempt a set status = 'succeeded', outputs_hash = c.outputs_hash, logs_hash = c.logs_hash,
    started_at = coalesce(c.started_at, a.started_at), finished_at = coalesce(c.finished_at, a.finished_at), terminated_at = now()
  from unnest(v_c) c
  where a.tenant_id = c.tenant_id and a.run_id = c.run_id and a.step_id = c.step_id and a.attempt = c.attempt
    and a.epoch = c.epoch and a.status = 'running';

  insert into artifact (tenant_id, sha256, media_type, size, body_json)
  select a.t, a.h, a.m, octet_length(a.b), a.b::jsonb
  from jsonb_to_recordset(p->'artifacts') as a(t text, h text, m text, b text)
  on conflict do nothing;

  -- The results' queue items leave the queue (counted per tenant: their slots are free).
  with rl as (
    delete from queue_item q using unnest(v_c) c
    -- (An item with an epoch is leased: ready items have none. Not naming the state keeps the
    -- partial index of leases, which has no key columns, out of this plan.)
    where q.tenant_id = c.tenant_id and q.run_id = c.run_id and q.step_id = c.step_id and q.epoch = c.epoch
    returning q.tenant_id
  )
  select coalesce(jsonb_object_agg(x.tenant_id, x.n), '{}') into v_rel
  from (select rl.tenant_id, count(*)::integer as n from rl group by rl.tenant_id) x;

  -- Dependents counted down; the ones left with no pending dependency become ready. A ready step
  -- that is disabled (skipped, and counted as done for its own dependents) or has a concurrency
  -- limit (claimed from the queue only) needs the general transaction.
  with d as (
    select s.tenant_id, s.run_id, s.step_id, count(*)::integer as n
    from unnest(v_c) c
    join step s on s.tenant_id = c.tenant_id and s.run_id = c.run_id and c.step_id = any(s.depends_on)
    where s.status = 'pending'
    group by s.tenant_id, s.run_id, s.step_id
  ),
  u as (
    update step s set pending_deps = s.pending_deps - d.n,
      status = case when s.pending_deps - d.n = 0 and not coalesce((s.spec->>'disabled')::boolean, false)
        then 'queued' else s.status end,
      queued_at = case when s.pending_deps - d.n = 0 then now() else s.queued_at end
    from d where s.tenant_id = d.tenant_id and s.run_id = d.run_id and s.step_id = d.step_id
    returning s.tenant_id, s.run_id, s.step_id, s.topo_index, s.pending_deps, s.status,
      s.spec->>'concurrency' is not null as gated
  )
  select array_agg(row(u.tenant_id, u.run_id, u.step_id, u.topo_index, false)::ordo_adv_ready
      order by u.tenant_id, u.run_id, u.topo_index, u.step_id),
    bool_or(u.status <> 'queued' or u.gated)
  into v_ready, v_disabled
  from u where u.pending_deps = 0;
  v_ready := coalesce(v_ready, '{}');
  if v_disabled then
    raise exception using errcode = 'OR001', message = 'a disabled or concurrency-limited step became ready';
  end if;

  if cardinality(v_ready) > 0 then
    -- Which ready successors go to this worker: while it has room (topological order, ties by step
    -- id), and per tenant as many as its results freed, more only under the tenant's in-flight cap
    -- (its leased items, these results' released, counted up to the cap).
    v_ready := array(
      select row(x.tenant_id, x.run_id, x.step_id, x.topo_index,
        x.n_all <= v_capacity and x.n_tenant <= case when x.want <= x.rel and f.used + x.rel <= v_cap then x.want else greatest(0, v_cap - f.used) end
      )::ordo_adv_ready
      from (
        select x.*,
          row_number() over (order by x.tenant_id, x.run_id, x.topo_index, x.step_id) as n_all,
          row_number() over (partition by x.tenant_id order by x.run_id, x.topo_index, x.step_id) as n_tenant,
          count(*) over (partition by x.tenant_id) as want,
          coalesce((v_rel->>x.tenant_id)::integer, 0) as rel
        from unnest(v_ready) x
      ) x
      left join (
        select w.tenant_id, (
          select count(*)::integer from (select 1 from queue_item l where l.tenant_id = w.tenant_id and l.state = 'leased' limit v_cap) l
        ) as used
        from (select distinct x.tenant_id from unnest(v_ready) x) w
      ) f on f.tenant_id = x.tenant_id
      order by x.tenant_id, x.run_id, x.topo_index, x.step_id
    );

    -- Ready successors go to this worker while it has room and the tenant is under its in-flight cap
    -- (topological order, ties by step id); the rest wait in the queue.
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
    l as (
      insert into queue_item (tenant_id, run_id, step_id, state, worker_id, epoch, lease_expires_at)
      select t.tenant_id, t.run_id, t.step_id, 'leased', v_worker, t.epoch, now() + v_lease from t
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
      raise exception using errcode = 'OR001', message = 'a ready step could not be dispatched';
    end if;

    -- Steps left for the queue, and the workers woken for them.
    with q as (
      insert into queue_item (tenant_id, run_id, step_id)
      select x.tenant_id, x.run_id, x.step_id from unnest(v_ready) x where not x.claim
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

  -- Runs with no step left end here, each with the hash of its steps' outputs; a waiting run of the
  -- same DAG (possible only for a DAG with a maxConcurrentRuns limit in one of its versions) needs
  -- the general transaction.
  v_ending := array(
    select row(x.tenant_id, x.run_id, x.dag_id, case when x.steps_failed > 0 then 'run.failed' else 'run.succeeded' end)::ordo_adv_ending
    from run x join (select c.tenant_id, c.run_id, count(*)::integer as n from unnest(v_c) c group by c.tenant_id, c.run_id) c
      on c.tenant_id = x.tenant_id and c.run_id = x.run_id
    where x.steps_remaining - c.n <= 0
    order by x.tenant_id, x.run_id
  );
  if cardinality(v_ending) > 0 then
    if exists (
      select 1 from (select distinct r.tenant_id, r.dag_id from unnest(v_ending) r) r
      where exists (
        select 1 from dag_version dv
        where dv.tenant_id = r.tenant_id and dv.dag_id = r.dag_id and dv.definition->'constraints' ? 'maxConcurrentRuns'
      ) and exists (
        select 1 from run w
        where w.tenant_id = r.tenant_id and w.dag_id = r.dag_id and w.status = 'queued' and not w.admitted
      )
    ) then
      raise exception using errcode = 'OR001', message = 'a run waits for a maxConcurrentRuns slot';
    end if;
  end if;

  -- The events, in the order they happened: results, successors queued, successors dispatched, run ends.
  v_e := array(
    select row(c.tenant_id, c.run_id, c.ord, 'step.succeeded', c.step_id, c.attempt, v_worker,
      '{"outputsHash":' || to_json(c.outputs_hash)::text || '}')::ordo_adv_event
    from unnest(v_c) c
    union all
    select row(x.tenant_id, x.run_id, 1000000 + n, 'step.queued', x.step_id, null, 'engine', '{}')::ordo_adv_event
    from unnest(v_ready) with ordinality as x(tenant_id, run_id, step_id, topo_index, claim, n)
    union all
    select row((x->>'tenant_id'), (x->>'run_id')::uuid, 2000000 + (x->>'k')::integer, 'step.running', x->>'step_id',
      (x->>'attempts')::integer, v_worker,
      '{"dispatchSeq":' || (x->>'dispatch_seq') || ',"epoch":' || (x->>'epoch') || '}')::ordo_adv_event
    from unnest(v_d) x
    union all
    select row(r.tenant_id, r.run_id, 3000000, r.type, null, null, 'engine',
      '{"outputsHash":' || to_json(encode(sha256(convert_to('{' || coalesce((
        select string_agg(to_json(s.step_id)::text || ':' || coalesce(to_json(s.outputs_hash)::text, 'null'), ','
          order by s.step_id collate "C")
        from step s where s.tenant_id = r.tenant_id and s.run_id = r.run_id and s.status = 'succeeded'
      ), '') || '}', 'UTF8')), 'hex'))::text || '}')::ordo_adv_event
    from unnest(v_ending) r
  );

  -- Events numbered after each run's last one, chained and appended, in the order they happened.
  v_ch := ordo_append_events(v_e, v_now);

  -- The runs' bookkeeping.
  with last as (
    select distinct on (e.tenant_id, e.run_id) e.tenant_id, e.run_id, e.seq, e.hash from unnest(v_ch) e
    order by e.tenant_id, e.run_id, e.seq desc
  ),
  fin as (
    select e.tenant_id, e.run_id, e.type, e.data from unnest(v_ch) e where e.type in ('run.succeeded', 'run.failed')
  ),
  disp as (
    select x.tenant_id, x.run_id, count(*)::integer as n from unnest(v_ready) x where x.claim group by x.tenant_id, x.run_id
  ),
  res as (
    select c.tenant_id, c.run_id, count(*)::integer as n from unnest(v_c) c group by c.tenant_id, c.run_id
  ),
  upd as (
    update run x set event_seq = last.seq, event_hash = last.hash,
      dispatch_count = x.dispatch_count + coalesce(disp.n, 0),
      steps_remaining = x.steps_remaining - coalesce(res.n, 0),
      status = case when fin.type is null then x.status else substr(fin.type, 5) end,
      finished_at = case when fin.type is null then x.finished_at else coalesce(x.finished_at, now()) end,
      outputs_hash = case when fin.type is null then x.outputs_hash else (fin.data::jsonb)->>'outputsHash' end
    from last
    left join fin on fin.tenant_id = last.tenant_id and fin.run_id = last.run_id
    left join disp on disp.tenant_id = last.tenant_id and disp.run_id = last.run_id
    left join res on res.tenant_id = last.tenant_id and res.run_id = last.run_id
    where x.tenant_id = last.tenant_id and x.run_id = last.run_id
    returning x.run_id, fin.type is not null as ended
  )
  select array_agg(upd.run_id) into v_ended from upd where upd.ended;

  if v_ended is null then
    return query select 'd'::text, x - 'k' from unnest(v_d) x
    union all
    select 'n'::text, x from ordo_take_notifications() x;
    return;
  end if;
  perform ordo_notify('ordo_run_finished', id::text) from unnest(v_ended) id;
  return query
    select 'd'::text, x - 'k' from unnest(v_d) x
    union all
    select 'e'::text, x from ordo_events_out(v_ch, v_now) x
    union all
    select 'n'::text, x from ordo_take_notifications() x;
end
$$;

revoke all on function ordo_engine_advance(p jsonb) from public;
grant all on function ordo_engine_advance(p jsonb) to ordo_system;
