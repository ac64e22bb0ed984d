-- The claim from the queue: fair rounds over the tenants with ready items (weighted round-robin),
-- each under its cap of steps in flight and its steps' concurrency gates, in time linear in the
-- steps it claims (the locked runs are a set of keys tested per item). Dispatches the claimed steps
-- to the worker with a lease and a fencing epoch, starts their runs on their first dispatch, and
-- drops the items of runs that ended. It returns no events: a claim neither ends a run nor retries a step.

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
  v_skip boolean := coalesce((p->>'skipLocked')::boolean, false);
  v_exclude text[] := array(select jsonb_array_elements_text(coalesce(p->'exclude', '[]')));
  -- Only these tenants, when named (a claim for the tenants a wake-up named).
  v_only text[] := case when p ? 'only' then array(select jsonb_array_elements_text(p->'only')) end;
  v_left integer := v_capacity;
  v_n integer;
  v_tenants text[];
  -- Each served tenant's steps in flight (its leased items, counted up to the cap), by position in v_tenants.
  v_used integer[];
  v_eligible text[];
  v_items ordo_claim_item[] := '{}';
  v_new ordo_claim_item[];
  -- The claimed items' runs this claim holds, as a set of "tenant/run" keys.
  v_locked jsonb;
  -- The last dispatch number each run gave out, by "tenant/run".
  v_last_dispatch jsonb;
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
      cross join lateral (select ordo_in_flight_cap(tq.max_in_flight, tq.weight, p) as cap) c
      cross join lateral (
        select count(*)::integer as used
        from (select 1 from queue_item l where l.tenant_id = tq.tenant_id and l.state = 'leased' limit c.cap) l
      ) f
      where tq.tenant_id <> all(v_exclude) and (v_only is null or tq.tenant_id = any(v_only))
        and coalesce((select true from queue_item q where q.tenant_id = tq.tenant_id and q.state = 'ready' limit 1), false)
        and f.used < c.cap
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
      cross join lateral (select ordo_in_flight_cap(tq.max_in_flight, tq.weight, p) as cap) c
      cross join lateral (
        select count(*)::integer as used
        from (select 1 from queue_item l where l.tenant_id = tq.tenant_id and l.state = 'leased' limit c.cap) l
      ) f
      where tq.tenant_id <> all(v_exclude) and (v_only is null or tq.tenant_id = any(v_only))
        and coalesce((select true from queue_item q where q.tenant_id = tq.tenant_id and q.state = 'ready' limit 1), false)
        and f.used < c.cap
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
    -- up to that many of its ready items, highest priority first and oldest first within a
    -- priority, skipping items another claimer holds.
    with t as (
      select u.tenant_id, u.ord, tq.weight, u.used as in_flight, ordo_in_flight_cap(tq.max_in_flight, tq.weight, p) as cap,
        (select count(*) from unnest(v_items) i where i.tenant_id = u.tenant_id)::integer as got
      from unnest(v_tenants, v_used) with ordinality as u(tenant_id, used, ord)
      join tenant_queue tq on tq.tenant_id = u.tenant_id
      where u.tenant_id = any(v_eligible)
    ),
    s as (
      select t.tenant_id, t.ord, t.weight,
        least(t.cap - t.in_flight - t.got, v_left, greatest(1, floor(v_left::numeric * t.weight / sum(t.weight) over ())))::integer as share
      from t
    ),
    q as (
      select i.tenant_id, i.id, i.run_id, i.step_id, i.enqueued_at, i.gate, i.gate_limit, i.priority, s.ord, s.weight, s.share
      from s cross join lateral (
        -- The tenant's first ready items: those without a gate, and under each gate this claim holds
        -- as many as the gate has slots for (its limit less its leased items and the items this
        -- claim took). A full gate is passed over without reading the items that wait under it.
        select y.* from (
          select x.tenant_id, x.id, x.run_id, x.step_id, x.enqueued_at, x.gate, x.gate_limit, x.priority from (
            select x.* from queue_item x
            where x.tenant_id = s.tenant_id and x.state = 'ready' and x.gate is null
              and x.id <> all(array(select c.id from unnest(v_items) c where c.tenant_id = s.tenant_id))
            order by x.priority desc, x.id limit greatest(s.share, 0)
            for update skip locked
          ) x
          union all
          select z.tenant_id, z.id, z.run_id, z.step_id, z.enqueued_at, z.gate, z.gate_limit, z.priority
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
            order by x.priority desc, x.id limit least(greatest(f.free, 0), greatest(s.share, 0))
            for update skip locked
          ) z
          where gl.tenant_id = s.tenant_id and f.free > 0 and gl.tenant_id || '/' || gl.gate = any(v_gates)
        ) y
        order by y.priority desc, y.id limit greatest(s.share, 0)
      ) i
    ),
    -- Of one gate's items taken together, as many as it has slots.
    f as (
      select q.* from (
        select q.*, row_number() over (partition by q.tenant_id, q.gate order by q.priority desc, q.id) as gk from q
      ) q
      where q.gate is null or q.gk + cardinality(array_positions(v_picked, q.tenant_id || '/' || q.gate))
        + (select count(*) from queue_item g where g.tenant_id = q.tenant_id and g.gate = q.gate and g.state = 'leased')
        <= q.gate_limit
    )
    -- In the order the worker runs them: the tenants' items interleaved by weight (the k-th item of
    -- a tenant of weight w at k / w), so that each tenant's steps wait behind the others' in
    -- proportion to its share, and tenants at their caps progress in proportion to their weights.
    select array_agg(row(q.tenant_id, q.id, q.run_id, q.step_id, q.enqueued_at, 0)::ordo_claim_item
        order by q.tk::numeric / q.weight, q.ord, q.priority desc, q.id),
      array_agg(distinct q.tenant_id) filter (where q.full_share),
      coalesce(array_agg(q.tenant_id || '/' || q.gate) filter (where q.gate is not null), '{}')
    into v_new, v_eligible, v_new_gates
    from (
      select f.*, count(*) over (partition by f.tenant_id) = f.share as full_share,
        row_number() over (partition by f.tenant_id order by f.priority desc, f.id) as tk
      from f
    ) q;
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

  -- Their runs, locked in key order (or left for later when another transaction holds them). The
  -- set of their keys is a JSON object: a test of membership per item instead of a join of two
  -- arrays, which (no hash joins in these functions) compared every item with every run.
  if v_skip then
    select coalesce(jsonb_object_agg(x.k, true), '{}') into v_locked from (
      select r.tenant_id || '/' || r.run_id::text as k from run r
      where (r.tenant_id, r.run_id) in (select i.tenant_id, i.run_id from unnest(v_items) i)
      order by r.tenant_id, r.run_id
      for update of r skip locked
    ) x;
  else
    select coalesce(jsonb_object_agg(x.k, true), '{}') into v_locked from (
      select r.tenant_id || '/' || r.run_id::text as k from run r
      where (r.tenant_id, r.run_id) in (select i.tenant_id, i.run_id from unnest(v_items) i)
      order by r.tenant_id, r.run_id
      for update of r
    ) x;
  end if;

  -- Items of active runs whose step is still queued are dispatched (running, new epoch, attempt
  -- row or the open attempt it resumes, lease, dispatch numbers after the run's last one in claim
  -- order); the others leave the queue. A queued run's first dispatch starts it.
  with o0 as (
    select i.tenant_id, i.id, i.run_id, i.step_id, i.enqueued_at, i.rk, r.status as run_status, r.dispatch_count,
      -- The live states as a variable: a generic plan cannot prove the partial index of active runs
      -- (tenant_id, dag_id, ...) applies, and reaches each run by its key.
      r.status = any (v_live) and st.status = 'queued' as ok,
      -- A step whose preconditions came to hold (db/functions/ordo_engine_precondition.sql) resumes
      -- its open attempt.
      st.reason is not distinct from 'precondition_held' as resumes
    from unnest(v_items) i
    join run r on r.tenant_id = i.tenant_id and r.run_id = i.run_id
    join step st on st.tenant_id = i.tenant_id and st.run_id = i.run_id and st.step_id = i.step_id
    where v_locked ? (i.tenant_id || '/' || i.run_id::text)
  ),
  o as (
    select o0.*, o0.dispatch_count + row_number() over (partition by o0.tenant_id, o0.run_id order by o0.rk) as seq
    from o0 where o0.ok
  ),
  gone as (
    delete from queue_item q using o0
    where not o0.ok and q.tenant_id = o0.tenant_id and q.id = o0.id
    returning 1
  ),
  d as (
    update step s set status = 'running', epoch = s.epoch + 1, attempts = s.attempts + (not o.resumes)::integer,
      reason = case when o.resumes then null else s.reason end,
      dispatch_seq = coalesce(s.dispatch_seq, o.seq::integer), started_at = coalesce(s.started_at, now())
    from o
    where s.tenant_id = o.tenant_id and s.run_id = o.run_id and s.step_id = o.step_id and s.status = 'queued'
    returning s.tenant_id, s.run_id, s.step_id, s.epoch, s.attempts, s.plugin, s.config, s.spec, s.depends_on,
      coalesce(s.queued_at, o.enqueued_at) as queued_at, o.seq::integer as dispatch_seq, o.id as item_id, o.rk,
      o.run_status = 'queued' and o.seq = o.dispatch_count + 1 as starts_run, o.resumes
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
    from t where not t.resumes
    returning 1
  ),
  ra as (
    update attempt a set epoch = t.epoch, worker_id = v_worker, lease_expires_at = now() + v_lease,
      traceparent = t.traceparent, constraint_checked_at = now()
    from t
    where t.resumes and a.tenant_id = t.tenant_id and a.run_id = t.run_id and a.step_id = t.step_id
      and a.attempt = t.attempts and a.status = 'running'
    returning 1
  )
  select coalesce(array_agg(to_jsonb(t) order by t.rk), '{}'),
    coalesce(jsonb_object_agg(t.tenant_id || '/' || t.run_id::text, t.dispatch_seq order by t.dispatch_seq), '{}'),
    (select count(*) from gone)
  into v_d, v_last_dispatch, v_n
  from t;

  -- Events: a run's first dispatch starts it (run.running), then each step.running in claim order.
  v_e := array(
    select row(x->>'tenant_id', (x->>'run_id')::uuid, 2 * n::integer - 1, 'run.running', null, null, 'engine', '{}')::ordo_adv_event
    from unnest(v_d) with ordinality as u(x, n)
    where (x->>'starts_run')::boolean
    union all
    select row(x->>'tenant_id', (x->>'run_id')::uuid, 2 * n::integer, 'step.running', x->>'step_id',
      (x->>'attempts')::integer, v_worker,
      '{"dispatchSeq":' || (x->>'dispatch_seq') || ',"epoch":' || (x->>'epoch') || '}')::ordo_adv_event
    from unnest(v_d) with ordinality as u(x, n)
  );
  v_ch := ordo_append_events(v_e, v_now);

  -- The runs' bookkeeping (each run's items were dispatched in queue order: its last one's number
  -- is its highest).
  update run r set event_seq = last.seq, event_hash = last.hash,
    dispatch_count = greatest(r.dispatch_count, (v_last_dispatch->>(last.tenant_id || '/' || last.run_id::text))::integer),
    status = case when r.status = 'queued' then 'running' else r.status end,
    started_at = coalesce(r.started_at, now())
  from ordo_event_heads(v_ch) last
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

  -- (No 'e' rows: a claim ends no run and retries no step, the events observed after a commit.)
  return query
    select 'dispatch'::text, x - 'rk' - 'item_id' - 'starts_run' from unnest(v_d) x
    union all
    select 'notify'::text, x from ordo_take_notifications() x;
end
$$;

revoke all on function ordo_engine_claim(p jsonb) from public;
grant all on function ordo_engine_claim(p jsonb) to ordo_system;
