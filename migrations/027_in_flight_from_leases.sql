-- Steps in flight are counted from the leases, not kept in a counter. Every hop, chain and claim
-- of a tenant wrote tenant_queue.in_flight, one row per tenant, and held its lock until the commit
-- was on disk: the tenant's hops committed one after another, never together, and a claim that
-- served a quiet tenant with a busy one waited for the busy tenant's hops (and for their WAL
-- flushes: up to 75 ms for one quiet step under load). A step in flight is a leased queue item, so
-- the claim and a hop that dispatches successors count the tenant's
-- leased items (up to the cap, through an index of leases by tenant) instead. Two claimers may both
-- take a tenant's last slots (the cap was soft before too).
--
-- A tenant's served_at (the claim's round order) is still written by the claims that serve it,
-- skipping a tenant another claim holds (it is being served). A slot freed and not taken again by
-- a successor wakes the workers when the tenant has ready steps, as the counter's trigger did.
--
-- The hop for one result is the chain with no link (ordo_engine_chain writes what ordo_engine_hop
-- did, in as many statements), so ordo_engine_hop goes. The function bodies are those of
-- migrations 023 (claim), 021 (advance) and 025 (chain) with these changes, and with no JIT.

create index queue_item_leased_idx on queue_item (tenant_id, gate) where state = 'leased';

-- The claim from the queue (migration 023).
create or replace function ordo_engine_claim(p jsonb) returns table (kind text, item jsonb)
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
  v_skip boolean := coalesce((p->>'skipLocked')::boolean, false);
  v_exclude text[] := array(select jsonb_array_elements_text(coalesce(p->'exclude', '[]')));
  -- Only these tenants, when named (a claim for the tenants a wake-up named).
  v_only text[] := case when p ? 'only' then array(select jsonb_array_elements_text(p->'only')) end;
  v_left integer := v_capacity;
  v_tenants text[];
  -- Each served tenant's steps in flight (its leased items, counted up to the cap), by position in v_tenants.
  v_used integer[];
  v_eligible text[];
  v_items ordo_claim_item[] := '{}';
  v_new ordo_claim_item[];
  v_locked ordo_run_key[];
  v_d jsonb[];
  v_e ordo_adv_event[];
  v_ch ordo_adv_chained[];
  v_live text[] := array['queued', 'running'];
  v_gates text[];
  v_gate text;
  -- Each (tenant, gate, limit) with ready items of the served tenants.
  v_gt text[];
  v_gg text[];
  v_gl integer[];
  v_picked text[] := '{}';
  v_new_gates text[];
begin
  if v_capacity = 0 then
    return;
  end if;
  -- The tenants to serve, least recently served first, with ready items and steps in flight under
  -- their cap (their leased items: counted, not kept in a row that every hop would write).
  if v_skip then
    select coalesce(array_agg(x.tenant_id order by x.served_at, x.tenant_id), '{}'),
      coalesce(array_agg(x.used order by x.served_at, x.tenant_id), '{}')
    into v_tenants, v_used
    from (
      select tq.tenant_id, tq.served_at, f.used from tenant_queue tq
      cross join lateral (
        select count(*)::integer as used
        from (select 1 from queue_item l where l.tenant_id = tq.tenant_id and l.state = 'leased' limit v_cap) l
      ) f
      where tq.tenant_id <> all(v_exclude) and (v_only is null or tq.tenant_id = any(v_only))
        and coalesce((select true from queue_item q where q.tenant_id = tq.tenant_id and q.state = 'ready' limit 1), false)
        and f.used < v_cap
      order by tq.served_at, tq.tenant_id
      limit least(256, v_capacity)
      for update of tq skip locked
    ) x;
  else
    select coalesce(array_agg(x.tenant_id order by x.served_at, x.tenant_id), '{}'),
      coalesce(array_agg(x.used order by x.served_at, x.tenant_id), '{}')
    into v_tenants, v_used
    from (
      select tq.tenant_id, tq.served_at, f.used from tenant_queue tq
      cross join lateral (
        select count(*)::integer as used
        from (select 1 from queue_item l where l.tenant_id = tq.tenant_id and l.state = 'leased' limit v_cap) l
      ) f
      where tq.tenant_id <> all(v_exclude) and (v_only is null or tq.tenant_id = any(v_only))
        and coalesce((select true from queue_item q where q.tenant_id = tq.tenant_id and q.state = 'ready' limit 1), false)
        and f.used < v_cap
      order by tq.served_at, tq.tenant_id
      limit least(256, v_capacity)
    ) x;
  end if;
  v_eligible := v_tenants;
  -- Steps with a concurrency limit wait in the queue under a gate (their DAG and step id). Each gate
  -- with ready items of these tenants is locked, in order, before its running steps (its leased
  -- items) are counted, so that two claims cannot both take its last slot; a claim that skips
  -- locked work leaves out the gates another claim holds.
  -- The gates are found by skipping through the index of gated ready items, one probe per gate
  -- and limit, however many items wait under each.
  with recursive g as (
    select u.tenant_id, x.gate, x.gate_limit
    from unnest(v_tenants) as u(tenant_id) cross join lateral (
      select q.gate, q.gate_limit from queue_item q
      where q.tenant_id = u.tenant_id and q.state = 'ready' and q.gate is not null
      order by q.gate, q.gate_limit limit 1
    ) x
    union all
    select g.tenant_id, x.gate, x.gate_limit
    from g cross join lateral (
      select q.gate, q.gate_limit from queue_item q
      where q.tenant_id = g.tenant_id and q.state = 'ready' and q.gate is not null
        and (q.gate, q.gate_limit) > (g.gate, g.gate_limit)
      order by q.gate, q.gate_limit limit 1
    ) x
  )
  select coalesce(array_agg(g.tenant_id order by g.tenant_id, g.gate, g.gate_limit), '{}'),
    coalesce(array_agg(g.gate order by g.tenant_id, g.gate, g.gate_limit), '{}'),
    coalesce(array_agg(g.gate_limit order by g.tenant_id, g.gate, g.gate_limit), '{}')
  into v_gt, v_gg, v_gl
  from g;
  v_gates := array(select distinct x.t || '/' || x.g from unnest(v_gt, v_gg) as x(t, g) order by 1);
  if cardinality(v_gates) > 0 then
    if v_skip then
      v_gates := array(select g from unnest(v_gates) g where pg_try_advisory_xact_lock(hashtextextended('ordo.gate/' || g, 0)));
    else
      foreach v_gate in array v_gates loop
        perform pg_advisory_xact_lock(hashtextextended('ordo.gate/' || v_gate, 0));
      end loop;
    end if;
  end if;
  for v_round in 1..3 loop
    exit when v_left <= 0 or cardinality(v_eligible) = 0;
    -- Each eligible tenant's share of what is left (by weight, at least one, within its cap), then
    -- up to that many of its oldest ready items, skipping items another claimer holds.
    with t as (
      select u.tenant_id, u.ord, tq.weight, u.used as in_flight,
        (select count(*) from unnest(v_items) i where i.tenant_id = u.tenant_id)::integer as got
      from unnest(v_tenants, v_used) with ordinality as u(tenant_id, used, ord)
      join tenant_queue tq on tq.tenant_id = u.tenant_id
      where u.tenant_id = any(v_eligible)
    ),
    s as (
      select t.tenant_id, t.ord,
        least(v_cap - t.in_flight - t.got, v_left, greatest(1, floor(v_left::numeric * t.weight / sum(t.weight) over ())))::integer as share
      from t
    ),
    q as (
      select i.tenant_id, i.id, i.run_id, i.step_id, i.enqueued_at, i.gate, i.gate_limit, s.ord, s.share
      from s cross join lateral (
        -- The tenant's oldest ready items: those without a gate, and under each gate this claim holds
        -- as many as the gate has slots for (its limit less its leased items and the items this
        -- claim took). A full gate is passed over without reading the items that wait under it.
        select y.* from (
          select x.tenant_id, x.id, x.run_id, x.step_id, x.enqueued_at, x.gate, x.gate_limit from (
            select x.* from queue_item x
            where x.tenant_id = s.tenant_id and x.state = 'ready' and x.gate is null
              and x.id <> all(array(select c.id from unnest(v_items) c where c.tenant_id = s.tenant_id))
            order by x.id limit greatest(s.share, 0)
            for update skip locked
          ) x
          union all
          select z.tenant_id, z.id, z.run_id, z.step_id, z.enqueued_at, z.gate, z.gate_limit
          from unnest(v_gt, v_gg, v_gl) as gl(tenant_id, gate, lim)
          cross join lateral (
            select gl.lim - (select count(*) from queue_item g
                where g.tenant_id = gl.tenant_id and g.gate = gl.gate and g.state = 'leased')::integer
              - cardinality(array_positions(v_picked, gl.tenant_id || '/' || gl.gate)) as free
          ) f
          cross join lateral (
            select x.* from queue_item x
            where x.tenant_id = gl.tenant_id and x.state = 'ready' and x.gate = gl.gate and x.gate_limit = gl.lim
              and x.id <> all(array(select c.id from unnest(v_items) c where c.tenant_id = s.tenant_id))
            order by x.id limit least(greatest(f.free, 0), greatest(s.share, 0))
            for update skip locked
          ) z
          where gl.tenant_id = s.tenant_id and f.free > 0 and gl.tenant_id || '/' || gl.gate = any(v_gates)
        ) y
        order by y.id limit greatest(s.share, 0)
      ) i
    ),
    -- Of one gate's items taken together, as many as it has slots.
    f as (
      select q.* from (
        select q.*, row_number() over (partition by q.tenant_id, q.gate order by q.id) as gk from q
      ) q
      where q.gate is null or q.gk + cardinality(array_positions(v_picked, q.tenant_id || '/' || q.gate))
        + (select count(*) from queue_item g where g.tenant_id = q.tenant_id and g.gate = q.gate and g.state = 'leased')
        <= q.gate_limit
    )
    select array_agg(row(q.tenant_id, q.id, q.run_id, q.step_id, q.enqueued_at, 0)::ordo_claim_item order by q.ord, q.id),
      array_agg(distinct q.tenant_id) filter (where q.full_share),
      coalesce(array_agg(q.tenant_id || '/' || q.gate) filter (where q.gate is not null), '{}')
    into v_new, v_eligible, v_new_gates
    from (select f.*, count(*) over (partition by f.tenant_id) = f.share as full_share from f) q;
    v_new := coalesce(v_new[1:v_left], '{}');
    v_eligible := coalesce(v_eligible, '{}');
    exit when cardinality(v_new) = 0;
    v_items := v_items || v_new;
    v_picked := v_picked || v_new_gates;
    v_left := v_left - cardinality(v_new);
  end loop;
  if cardinality(v_items) = 0 then
    return;
  end if;
  perform set_config('ordo.notify_after_commit', 'on', true);
  v_items := array(
    select row(i.tenant_id, i.id, i.run_id, i.step_id, i.enqueued_at, n::integer)::ordo_claim_item
    from unnest(v_items) with ordinality as i(tenant_id, id, run_id, step_id, enqueued_at, rk, n)
  );

  -- Their runs, locked in key order (or left for later when another transaction holds them).
  if v_skip then
    v_locked := array(
      select row(r.tenant_id, r.run_id)::ordo_run_key from run r
      where (r.tenant_id, r.run_id) in (select i.tenant_id, i.run_id from unnest(v_items) i)
      order by r.tenant_id, r.run_id
      for update of r skip locked
    );
  else
    v_locked := array(
      select row(r.tenant_id, r.run_id)::ordo_run_key from run r
      where (r.tenant_id, r.run_id) in (select i.tenant_id, i.run_id from unnest(v_items) i)
      order by r.tenant_id, r.run_id
      for update of r
    );
  end if;

  -- Items of active runs whose step is still queued are dispatched (running, new epoch, attempt
  -- row, lease, dispatch numbers after the run's last one in queue order); the others leave the queue.
  with o as (
    select i.tenant_id, i.id, i.run_id, i.step_id, i.enqueued_at, i.rk, r.status as run_status,
      r.dispatch_count + row_number() over (partition by i.tenant_id, i.run_id order by i.id) as seq
    from unnest(v_items) i
    join unnest(v_locked) k on k.tenant_id = i.tenant_id and k.run_id = i.run_id
    join run r on r.tenant_id = i.tenant_id and r.run_id = i.run_id
    join step st on st.tenant_id = i.tenant_id and st.run_id = i.run_id and st.step_id = i.step_id
    -- The live states as a variable: a generic plan cannot prove the partial index of active runs
    -- (tenant_id, dag_id, ...) applies, and reaches each run by its key.
    where r.status = any (v_live) and st.status = 'queued'
  ),
  d as (
    update step s set status = 'running', epoch = s.epoch + 1, attempts = s.attempts + 1,
      dispatch_seq = coalesce(s.dispatch_seq, o.seq::integer), started_at = coalesce(s.started_at, now())
    from o
    where s.tenant_id = o.tenant_id and s.run_id = o.run_id and s.step_id = o.step_id and s.status = 'queued'
    returning s.tenant_id, s.run_id, s.step_id, s.epoch, s.attempts, s.plugin, s.config, s.spec, s.depends_on,
      coalesce(s.queued_at, o.enqueued_at) as queued_at, o.seq::integer as dispatch_seq, o.id as item_id, o.rk, o.run_status
  ),
  t as (
    select d.*, r.dag_id, r.dag_version, r.trace_id,
      '00-' || r.trace_id || '-' || substr(md5(gen_random_uuid()::text), 1, 16) || '-01' as traceparent
    from d join run r on r.tenant_id = d.tenant_id and r.run_id = d.run_id
  ),
  l as (
    update queue_item q set state = 'leased', worker_id = v_worker, epoch = t.epoch, lease_expires_at = now() + v_lease
    from t where q.tenant_id = t.tenant_id and q.id = t.item_id
    returning 1
  ),
  a as (
    insert into attempt (tenant_id, run_id, step_id, attempt, epoch, worker_id, lease_expires_at, traceparent, queued_at,
      claimed_at, constraint_checked_at)
    select t.tenant_id, t.run_id, t.step_id, t.attempts, t.epoch, v_worker, now() + v_lease, t.traceparent, t.queued_at, now(), now()
    from t
    returning 1
  )
  select array_agg(to_jsonb(t) order by t.rk) into v_d from t;
  v_d := coalesce(v_d, '{}');
  delete from queue_item q
  using unnest(v_items) i, unnest(v_locked) k
  where k.tenant_id = i.tenant_id and k.run_id = i.run_id and q.tenant_id = i.tenant_id and q.id = i.id
    and q.id <> all(array(select (x->>'item_id')::bigint from unnest(v_d) x));

  -- Events: a run's first dispatch starts it (run.running), then each step.running in claim order.
  v_e := array(
    select row(x->>'tenant_id', (x->>'run_id')::uuid, 2 * n::integer - 1, 'run.running', null, null, 'engine', '{}')::ordo_adv_event
    from unnest(v_d) with ordinality as u(x, n)
    where x->>'run_status' = 'queued' and (x->>'dispatch_seq')::integer = (
      select min((y->>'dispatch_seq')::integer) from unnest(v_d) y
      where y->>'tenant_id' = x->>'tenant_id' and y->>'run_id' = x->>'run_id')
    union all
    select row(x->>'tenant_id', (x->>'run_id')::uuid, 2 * n::integer, 'step.running', x->>'step_id',
      (x->>'attempts')::integer, v_worker,
      '{"dispatchSeq":' || (x->>'dispatch_seq') || ',"epoch":' || (x->>'epoch') || '}')::ordo_adv_event
    from unnest(v_d) with ordinality as u(x, n)
  );
  v_ch := ordo_append_events(v_e, v_now);

  -- The runs' bookkeeping.
  with last as (
    select distinct on (e.tenant_id, e.run_id) e.tenant_id, e.run_id, e.seq, e.hash from unnest(v_ch) e
    order by e.tenant_id, e.run_id, e.seq desc
  ),
  disp as (
    select x->>'tenant_id' as tenant_id, (x->>'run_id')::uuid as run_id, max((x->>'dispatch_seq')::integer) as seq
    from unnest(v_d) x group by 1, 2
  )
  update run r set event_seq = last.seq, event_hash = last.hash, dispatch_count = greatest(r.dispatch_count, disp.seq),
    status = case when r.status = 'queued' then 'running' else r.status end,
    started_at = coalesce(r.started_at, now())
  from last join disp on disp.tenant_id = last.tenant_id and disp.run_id = last.run_id
  where r.tenant_id = last.tenant_id and r.run_id = last.run_id;
  -- The served tenants go to the back of the round. A tenant another claim holds is being served
  -- by it and keeps its place: this claim never waits for another one here.
  update tenant_queue tq set served_at = clock_timestamp()
  where tq.tenant_id in (
    select t.tenant_id from tenant_queue t
    where t.tenant_id in (select distinct x->>'tenant_id' from unnest(v_d) x)
    order by t.tenant_id
    for update of t skip locked
  );

  return query
    select 'd'::text, x - 'rk' - 'item_id' - 'run_status' from unnest(v_d) x
    union all
    select 'e'::text, x from ordo_events_out(v_ch, v_now) x
    union all
    select 'n'::text, x from ordo_take_notifications() x;
end
$$;

-- The hop for a batch of successful results (migration 021).
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

-- A result and the links a worker ran after it before it committed (migration 025); with no link,
-- the hop for one result.
create or replace function ordo_engine_chain(p jsonb) returns table (kind text, item jsonb)
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
  v_c jsonb := p->'completions'->0;
  v_t text := v_c->>'t';
  v_r uuid := (v_c->>'r')::uuid;
  v_s text := v_c->>'s';
  v_a integer := (v_c->>'a')::integer;
  v_ep integer := (v_c->>'e')::integer;
  v_o jsonb := nullif(v_c->'o', 'null'::jsonb);
  v_oh text := v_c->>'oh';
  v_lh text := v_c->>'lh';
  v_links jsonb := coalesce(p->'links', '[]');
  v_n integer := jsonb_array_length(coalesce(p->'links', '[]'));
  v_last text;
  v_status text;
  v_remaining integer;
  v_dispatched integer;
  v_failed integer;
  v_dag text;
  v_version integer;
  v_trace text;
  v_rel integer;
  v_ready ordo_adv_ready[];
  v_disabled boolean;
  v_want integer := 0;
  v_in_flight integer;
  v_claim integer := 0;
  v_d jsonb[] := '{}';
  v_l jsonb[];
  v_end text;
  v_end_hash text;
  v_ch ordo_adv_chained[] := '{}';
  v_events ordo_adv_event[];
  v_ev ordo_adv_event;
  v_x jsonb;
  v_seq integer;
  v_prev text;
  v_hash text;
  v_created text := to_char(v_now at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"');
  v_done integer;
  v_ok integer;
  v_ahead text := p->'ahead'->>'s';
  v_ahead_tp text := p->'ahead'->>'tp';
begin
  if jsonb_array_length(p->'completions') <> 1 then
    raise exception using errcode = 'OR001', message = 'a chain starts from one result';
  end if;
  v_last := coalesce(v_links->(v_n - 1)->>'s', v_s);
  perform set_config('ordo.notify_after_commit', 'on', true);

  -- The run, locked first (as every engine transaction locks it): it must be running.
  select x.status, x.steps_remaining, x.dispatch_count, x.steps_failed, x.dag_id, x.dag_version, x.trace_id,
    x.event_seq, x.event_hash
  into v_status, v_remaining, v_dispatched, v_failed, v_dag, v_version, v_trace, v_seq, v_prev
  from run x
  where x.tenant_id = v_t and x.run_id = v_r
  for update of x;
  if not found or v_status <> 'running' then
    raise exception using errcode = 'OR001', message = 'a run of the batch is not running';
  end if;

  -- Each link, in the order it ran: its step is pending on the step before it (the first result's
  -- for the first link) alone, never attempted, the only dependent of that step, not disabled and
  -- not limited, with the plugin and config the worker ran. Locked, as the hop locks what it writes.
  if v_n > 0 then
    select count(*)::integer into v_ok
    from (
      select s.step_id
      from jsonb_array_elements(v_links) with ordinality as l(x, k)
      join step s on s.tenant_id = v_t and s.run_id = v_r and s.step_id = l.x->>'s'
      where s.status = 'pending' and s.pending_deps = 1 and s.attempts = 0
        and s.depends_on = array[case when l.k = 1 then v_s else v_links->(l.k::integer - 2)->>'s' end]
        and s.plugin = l.x->>'pl' and s.config = l.x->'cf'
        and not coalesce((s.spec->>'disabled')::boolean, false) and s.spec->>'concurrency' is null
        and not exists (
          select 1 from step o
          where o.tenant_id = v_t and o.run_id = v_r and o.step_id <> s.step_id and s.depends_on[1] = any(o.depends_on)
        )
      for update of s
    ) ok;
    if v_ok <> v_n then
      raise exception using errcode = 'OR001', message = 'a chained step is not the next step of its chain';
    end if;
  end if;

  -- One statement for the rows of the first result, which are all different rows: the step (it
  -- must still be running at the reported epoch), its attempt, its artifacts, its queue item (its
  -- slot is free), and the links queued (ready when the step before them finished); with no link,
  -- its dependents counted down (the ones left with no pending dependency become ready, in
  -- topological order, ties by step id).
  with res as (
    update step s set status = 'succeeded', outputs = coalesce(v_o, s.outputs), outputs_hash = v_oh,
      logs_hash = coalesce(v_lh, s.logs_hash), finished_at = now()
    where s.tenant_id = v_t and s.run_id = v_r and s.step_id = v_s and s.status = 'running' and s.epoch = v_ep
    returning 1
  ),
  att as (
    update attempt a set status = 'succeeded', outputs_hash = v_oh, logs_hash = v_lh,
      started_at = coalesce((v_c->>'sa')::timestamptz, a.started_at), finished_at = coalesce((v_c->>'fa')::timestamptz, a.finished_at),
      terminated_at = now()
    where a.tenant_id = v_t and a.run_id = v_r and a.step_id = v_s and a.attempt = v_a and a.epoch = v_ep and a.status = 'running'
  ),
  art as (
    insert into artifact (tenant_id, sha256, media_type, size, body_json)
    select a.t, a.h, a.m, octet_length(a.b), a.b::jsonb
    from jsonb_to_recordset(p->'artifacts') as a(t text, h text, m text, b text)
    on conflict do nothing
  ),
  item as (
    delete from queue_item q
    where q.tenant_id = v_t and q.run_id = v_r and q.step_id = v_s and q.epoch = v_ep
    returning 1
  ),
  q as (
    update step s set status = 'queued', pending_deps = 0,
      queued_at = coalesce(((case when l.k = 1 then v_c else v_links->(l.k::integer - 2) end)->>'fa')::timestamptz, now())
    from jsonb_array_elements(v_links) with ordinality as l(x, k)
    where s.tenant_id = v_t and s.run_id = v_r and s.step_id = l.x->>'s' and s.status = 'pending'
    returning 1
  ),
  deps as (
    update step s set pending_deps = s.pending_deps - 1,
      status = case when s.pending_deps = 1 and not coalesce((s.spec->>'disabled')::boolean, false)
        then 'queued' else s.status end,
      queued_at = case when s.pending_deps = 1 then now() else s.queued_at end
    where v_n = 0 and s.tenant_id = v_t and s.run_id = v_r and v_s = any(s.depends_on) and s.status = 'pending'
    returning s.step_id, s.topo_index, s.pending_deps, s.status, s.spec->>'concurrency' is not null as gated
  )
  select (select count(*) from res)::integer, (select count(*) from item)::integer, (select count(*) from q)::integer,
    coalesce(array_agg(row(v_t, v_r, d.step_id, d.topo_index, false)::ordo_adv_ready order by d.topo_index, d.step_id)
      filter (where d.pending_deps = 0), '{}'),
    coalesce(bool_or(d.status <> 'queued' or d.gated) filter (where d.pending_deps = 0), false)
  into v_done, v_rel, v_ok, v_ready, v_disabled
  from deps d;
  if v_done <> 1 then
    raise exception using errcode = 'OR001', message = 'a result of the batch is not current';
  end if;
  if v_ok <> v_n then
    raise exception using errcode = 'OR001', message = 'a chained step could not be queued';
  end if;

  if v_n > 0 then
    -- The links dispatched to this worker, in their order, with attempts as the claim makes them.
    with d as (
      update step s set status = 'running', epoch = s.epoch + 1, attempts = s.attempts + 1,
        dispatch_seq = coalesce(s.dispatch_seq, v_dispatched + l.k::integer), started_at = coalesce(s.started_at, (l.x->>'sa')::timestamptz, now())
      from jsonb_array_elements(v_links) with ordinality as l(x, k)
      where s.tenant_id = v_t and s.run_id = v_r and s.step_id = l.x->>'s' and s.status = 'queued'
      returning s.step_id, s.epoch, s.attempts, s.queued_at, v_dispatched + l.k::integer as dispatch_seq, l.k, l.x
    ),
    a as (
      insert into attempt (tenant_id, run_id, step_id, attempt, epoch, worker_id, lease_expires_at, traceparent, queued_at,
        claimed_at, constraint_checked_at)
      select v_t, v_r, d.step_id, d.attempts, d.epoch, v_worker, now() + v_lease, d.x->>'tp', d.queued_at,
        coalesce((d.x->>'sa')::timestamptz, now()), coalesce((d.x->>'sa')::timestamptz, now())
      from d
      returning 1
    )
    select array_agg(jsonb_build_object('step_id', d.step_id, 'epoch', d.epoch, 'attempts', d.attempts,
        'dispatch_seq', d.dispatch_seq, 'x', d.x) order by d.k)
    into v_l
    from d;
    if coalesce(cardinality(v_l), 0) <> v_n then
      raise exception using errcode = 'OR001', message = 'a chained step could not be dispatched';
    end if;

    -- The links' results, and the dependents of the last link counted down (the ones left with no
    -- pending dependency become ready, in topological order, ties by step id).
    with res as (
      update step s set status = 'succeeded', outputs = nullif(l.x->'o', 'null'::jsonb), outputs_hash = l.x->>'oh',
        logs_hash = l.x->>'lh', finished_at = now()
      from jsonb_array_elements(v_links) as l(x)
      where s.tenant_id = v_t and s.run_id = v_r and s.step_id = l.x->>'s' and s.status = 'running'
      returning 1
    ),
    att as (
      update attempt a set status = 'succeeded', outputs_hash = l.x->>'oh', logs_hash = l.x->>'lh',
        started_at = (l.x->>'sa')::timestamptz, finished_at = (l.x->>'fa')::timestamptz, terminated_at = now()
      from jsonb_array_elements(v_links) as l(x)
      where a.tenant_id = v_t and a.run_id = v_r and a.step_id = l.x->>'s' and a.attempt = 1 and a.status = 'running'
    ),
    deps as (
      update step s set pending_deps = s.pending_deps - 1,
        status = case when s.pending_deps = 1 and not coalesce((s.spec->>'disabled')::boolean, false)
          then 'queued' else s.status end,
        queued_at = case when s.pending_deps = 1 then now() else s.queued_at end
      where s.tenant_id = v_t and s.run_id = v_r and v_last = any(s.depends_on) and s.status = 'pending'
      returning s.step_id, s.topo_index, s.pending_deps, s.status, s.spec->>'concurrency' is not null as gated
    )
    select (select count(*) from res)::integer,
      coalesce(array_agg(row(v_t, v_r, d.step_id, d.topo_index, false)::ordo_adv_ready order by d.topo_index, d.step_id)
        filter (where d.pending_deps = 0), '{}'),
      coalesce(bool_or(d.status <> 'queued' or d.gated) filter (where d.pending_deps = 0), false)
    into v_done, v_ready, v_disabled
    from deps d;
    if v_done <> v_n then
      raise exception using errcode = 'OR001', message = 'a chained step could not be finished';
    end if;
  end if;
  if v_disabled then
    raise exception using errcode = 'OR001', message = 'a disabled or concurrency-limited step became ready';
  end if;
  v_dispatched := v_dispatched + v_n;
  v_want := cardinality(v_ready);

  -- The last link's successors: as many go to this worker as it has room for and the tenant's cap
  -- allows: the slot the first result freed (the links ran in it), more only under the cap (the
  -- tenant's leased items, the first result's released, counted up to the cap).
  if v_want > 0 then
    select count(*)::integer into v_in_flight
    from (select 1 from queue_item l where l.tenant_id = v_t and l.state = 'leased' limit v_cap) l;
    v_claim := least(v_want, v_capacity,
      case when v_want <= v_rel and v_in_flight + v_rel <= v_cap then v_want else greatest(0, v_cap - v_in_flight) end);

    if v_claim > 0 then
      with c as (
        select x.step_id, x.k
        from unnest(v_ready) with ordinality as x(tenant_id, run_id, step_id, topo_index, claim, k)
        where x.k <= v_claim
      ),
      d as (
        update step s set status = 'running', epoch = s.epoch + 1, attempts = s.attempts + 1,
          dispatch_seq = coalesce(s.dispatch_seq, v_dispatched + c.k::integer), started_at = coalesce(s.started_at, now())
        from c
        where s.tenant_id = v_t and s.run_id = v_r and s.step_id = c.step_id and s.status = 'queued'
        returning s.tenant_id, s.run_id, s.step_id, s.epoch, s.attempts, s.plugin, s.config, s.spec, s.depends_on, s.queued_at,
          v_dispatched + c.k::integer as dispatch_seq, c.k
      ),
      t as (
        select d.*, v_dag as dag_id, v_version as dag_version, v_trace as trace_id,
          case when d.step_id = v_ahead then v_ahead_tp
            else '00-' || v_trace || '-' || substr(md5(gen_random_uuid()::text), 1, 16) || '-01' end as traceparent
        from d
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
      select coalesce(array_agg(to_jsonb(t) order by t.k), '{}') into v_d from t;
      if cardinality(v_d) <> v_claim then
        raise exception using errcode = 'OR001', message = 'a ready step could not be dispatched';
      end if;
    end if;

    if v_claim < v_want then
      insert into queue_item (tenant_id, run_id, step_id)
      select x.tenant_id, x.run_id, x.step_id
      from unnest(v_ready) with ordinality as x(tenant_id, run_id, step_id, topo_index, claim, k)
      where x.k > v_claim
      order by x.k;
      perform ordo_notify('ordo_ready', v_t);
    end if;
  end if;

  -- A slot freed and not taken again: a tenant with ready steps wakes the workers (a claim may have
  -- passed it over at its cap).
  if v_rel > v_claim and exists (select 1 from queue_item q where q.tenant_id = v_t and q.state = 'ready') then
    perform ordo_notify('ordo_ready', v_t);
  end if;

  -- A run with no step left ends here (as in the hop).
  if v_remaining - 1 - v_n <= 0 then
    if exists (
      select 1 from dag_version dv
      where dv.tenant_id = v_t and dv.dag_id = v_dag and dv.definition->'constraints' ? 'maxConcurrentRuns'
    ) and exists (
      select 1 from run w where w.tenant_id = v_t and w.dag_id = v_dag and w.status = 'queued' and not w.admitted
    ) then
      raise exception using errcode = 'OR001', message = 'a run waits for a maxConcurrentRuns slot';
    end if;
    v_end := case when v_failed > 0 then 'run.failed' else 'run.succeeded' end;
    select encode(sha256(convert_to('{' || coalesce(string_agg(
        to_json(s.step_id)::text || ':' || coalesce(to_json(s.outputs_hash)::text, 'null'), ',' order by s.step_id collate "C"),
      '') || '}', 'UTF8')), 'hex')
    into v_end_hash
    from step s where s.tenant_id = v_t and s.run_id = v_r and s.status = 'succeeded';
  end if;

  -- The events, in the order one hop per result writes them: the first result; for each link, it
  -- queued, dispatched and succeeded; the last link's successors queued and dispatched; the run's end.
  v_events := array[row(v_t, v_r, 0, 'step.succeeded', v_s, v_a, v_worker,
    '{"outputsHash":' || to_json(v_oh)::text || '}')::ordo_adv_event];
  foreach v_x in array coalesce(v_l, '{}') loop
    v_events := v_events
      || row(v_t, v_r, 0, 'step.queued', v_x->>'step_id', null, 'engine', '{}')::ordo_adv_event
      || row(v_t, v_r, 0, 'step.running', v_x->>'step_id', (v_x->>'attempts')::integer, v_worker,
        '{"dispatchSeq":' || (v_x->>'dispatch_seq') || ',"epoch":' || (v_x->>'epoch') || '}')::ordo_adv_event
      || row(v_t, v_r, 0, 'step.succeeded', v_x->>'step_id', (v_x->>'attempts')::integer, v_worker,
        '{"outputsHash":' || to_json(v_x->'x'->>'oh')::text || '}')::ordo_adv_event;
  end loop;
  v_events := v_events || array(
    select u.e from (
      select row(v_t, v_r, 1000000 + x.k::integer, 'step.queued', x.step_id, null, 'engine', '{}')::ordo_adv_event as e
      from unnest(v_ready) with ordinality as x(tenant_id, run_id, step_id, topo_index, claim, k)
      union all
      select row(v_t, v_r, 2000000 + (x->>'k')::integer, 'step.running', x->>'step_id', (x->>'attempts')::integer, v_worker,
        '{"dispatchSeq":' || (x->>'dispatch_seq') || ',"epoch":' || (x->>'epoch') || '}')::ordo_adv_event
      from unnest(v_d) x
      union all
      select row(v_t, v_r, 3000000, v_end, null, null, 'engine', '{"outputsHash":' || to_json(v_end_hash)::text || '}')::ordo_adv_event
      where v_end is not null
    ) u
    order by (u.e).ord
  );
  foreach v_ev in array v_events loop
    v_seq := v_seq + 1;
    v_hash := ordo_event_hash(v_prev, v_r, v_seq, v_created, v_ev.type, v_ev.step_id, v_ev.attempt, v_ev.actor, v_ev.data);
    v_ch := v_ch || row(v_t, v_r, v_seq, v_ev.type, v_ev.step_id, v_ev.attempt, v_ev.actor, v_ev.data, v_prev, v_hash)::ordo_adv_chained;
    v_prev := v_hash;
  end loop;

  with ev as (
    insert into run_event (tenant_id, run_id, seq, created_at, type, step_id, attempt, actor, data, prev_hash, hash)
    select e.tenant_id, e.run_id, e.seq, v_now, e.type, e.step_id, e.attempt, e.actor, e.data::jsonb, e.prev_hash, e.hash
    from unnest(v_ch) e order by e.seq
  )
  update run x set event_seq = v_seq, event_hash = v_prev,
    dispatch_count = x.dispatch_count + v_n + v_claim,
    steps_remaining = x.steps_remaining - 1 - v_n,
    status = coalesce(substr(v_end, 5), x.status),
    finished_at = case when v_end is null then x.finished_at else coalesce(x.finished_at, now()) end,
    outputs_hash = case when v_end is null then x.outputs_hash else v_end_hash end
  where x.tenant_id = v_t and x.run_id = v_r;

  if v_end is null then
    return query select 'd'::text, x - 'k' from unnest(v_d) x
    union all
    select 'n'::text, x from ordo_take_notifications() x;
    return;
  end if;
  perform ordo_notify('ordo_run_finished', v_r::text);
  return query
    select 'd'::text, x - 'k' from unnest(v_d) x
    union all
    select 'e'::text, x from ordo_events_out(v_ch, v_now) x
    union all
    select 'n'::text, x from ordo_take_notifications() x;
end
$$;
drop function ordo_engine_hop(jsonb);
drop trigger tenant_queue_slots_freed on tenant_queue;
drop function ordo_tenant_slots_freed();
alter table tenant_queue drop column in_flight;
