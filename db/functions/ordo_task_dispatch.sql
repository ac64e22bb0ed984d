-- Dispatch of a pool's pending tasks, the only home of the strategies: under the pool's
-- transaction advisory lock (dispatchers of a pool take turns; nothing else takes it), each pending
-- task in order (priority, then age, then id) goes to the best worker that can take it, or stays
-- pending (ordo_task_wait_reason says why); with no free slot in the pool, no task is looked at. A
-- worker can take a task when it fits it (ordo_worker_fits), holds fewer tasks than its
-- maxConcurrent, and its name's reputation is not blocked. The strategy (the task's, else the
-- pool's, else default) orders the candidates, ties by worker id:
--   default            warm first (its last task was of this type, or it has the required models
--                      loaded), then cheapest
--   round_robin        the next worker id after the pool's cursor, wrapping
--   least_connections  fewest tasks held
--   cheapest           lowest cost per second
--   best_value         lowest cost per second divided by reputation score
-- The live workers, the tasks they hold and their last task type are read once and kept up to
-- date in memory as tasks are chosen; the choices are written together at the end.
--
-- The takers (`p_takers`: [{workerId, room}], the workers of this pool whose channel or long-poll
-- in the calling process can take `room` more tasks now) are handed tasks at once, up to their
-- room: first the ones assigned to them before (oldest first), then the ones assigned now; those
-- are delivered and returned, so the caller sends them without another transaction. Every worker
-- left with a task assigned now is notified (ordo_task, [tenant, worker]) and pulls it. It is
-- called as a statement of its own, whose commit does not wait for its WAL flush: an assignment or
-- delivery lost in a crash leaves the task pending or assigned again, and a result is fenced by
-- its epoch and idempotent.

drop function if exists ordo_task_dispatch(text, text);

drop function if exists ordo_task_dispatch(text, text, jsonb);

-- Each delivered task is returned as its worker_task row in JSON (to_jsonb): a function's signature
-- names no table's row type, so the function files apply before the tables they read exist.
create or replace function ordo_task_dispatch(p_tenant text, p_pool text, p_takers jsonb default '[]',
  p_landing uuid[] default '{}')
  returns setof jsonb
  language plpgsql
  set jit = off
  set plan_cache_mode = force_generic_plan
  set enable_seqscan = off
  set enable_hashjoin = off
  set enable_mergejoin = off
  as $$
declare
  v_now timestamptz := clock_timestamp();
  v_t record;
  v_ws worker[];
  v_held integer[];
  v_queued integer[];
  v_score double precision[];
  v_last text[];
  v_room integer[];
  v_strategy text;
  v_rr uuid;
  v_rr_moved boolean := false;
  v_models text[];
  v_free bigint := 0;
  v_n integer;
  v_i integer;
  v_best integer;
  v_k1 integer;
  v_k2 numeric;
  v_b1 integer;
  v_b2 numeric;
  v_id uuid[];
  v_max integer[];
  v_cost numeric[];
  v_fit boolean[];
  v_warm boolean[];
  v_key text;
  v_a_task uuid[] := '{}';
  v_a_worker uuid[] := '{}';
  v_a_deliver boolean[] := '{}';
begin
  perform set_config('synchronous_commit', 'off', true);
  perform pg_advisory_xact_lock(hashtextextended(jsonb_build_array('ordo_task_dispatch', p_tenant, p_pool)::text, 31));
  select wp.strategy, wp.rr_last into v_strategy, v_rr from worker_pool wp
  where wp.tenant_id = p_tenant and wp.pool = p_pool;
  -- The pool's live, unblocked workers in id order: the tasks each holds (and how many of them wait
  -- assigned), its score, and the room its takers here have.
  select coalesce(array_agg(w order by w.worker_id), '{}'), coalesce(array_agg(h.held order by w.worker_id), '{}'),
    coalesce(array_agg(h.queued order by w.worker_id), '{}'),
    coalesce(array_agg(coalesce(r.score, 0.5) order by w.worker_id), '{}'),
    coalesce(array_agg(w.last_task_type order by w.worker_id), '{}'),
    coalesce(array_agg(coalesce(k.room, 0) order by w.worker_id), '{}'),
    coalesce(sum(greatest(w.max_concurrent - h.held, 0)), 0)
  into v_ws, v_held, v_queued, v_score, v_last, v_room, v_free
  from worker w
  left join worker_reputation r on r.tenant_id = w.tenant_id and r.pool = w.pool and r.name = w.name
  left join (
    select (x->>'workerId')::uuid as worker_id, sum((x->>'room')::integer)::integer as room
    from jsonb_array_elements(p_takers) x group by 1
  ) k on k.worker_id = w.worker_id
  cross join lateral (
    select (count(*) filter (where t.task_id <> all (p_landing)))::integer as held,
      (count(*) filter (where t.status = 'assigned'))::integer as queued
    from worker_task t
    where t.tenant_id = w.tenant_id and t.worker_id = w.worker_id and t.status in ('assigned', 'delivered')
  ) h
  where w.tenant_id = p_tenant and w.pool = p_pool and w.status = 'online'
    and w.last_seen_at + make_interval(secs => w.ttl_ms::numeric / 1000) > now() and r.blocked_at is null;

  -- Takers first get the tasks assigned to them before.
  for v_i in 1 .. coalesce(array_length(v_ws, 1), 0) loop
    continue when v_room[v_i] <= 0 or v_queued[v_i] = 0;
    return query
      with u as (
        update worker_task t set status = 'delivered', delivered_at = v_now
        from (
          select h.task_id from worker_task h
          where h.tenant_id = p_tenant and h.worker_id = v_ws[v_i].worker_id and h.status = 'assigned'
          order by h.assigned_at, h.task_id
          limit v_room[v_i]
          for update skip locked
        ) d
        where t.tenant_id = p_tenant and t.task_id = d.task_id
        returning t.*
      )
      select to_jsonb(u) from u;
    get diagnostics v_n = row_count;
    v_room[v_i] := v_room[v_i] - v_n;
  end loop;

  v_id := array(select w.worker_id from unnest(v_ws) w);
  v_max := array(select w.max_concurrent from unnest(v_ws) w);
  v_cost := array(select w.cost_per_second from unnest(v_ws) w);
  if v_free > 0 then
    for v_t in
      select t.task_id, t.task_type, t.requires, coalesce(t.strategy, v_strategy, 'default') as strategy
      from worker_task t
      where t.tenant_id = p_tenant and t.pool = p_pool and t.status = 'pending'
      order by t.priority desc, t.created_at, t.task_id
      for update of t skip locked
    loop
      exit when v_free <= 0;
      -- Which workers fit the task, and which have its models loaded, read once per task type and
      -- requirements in a row (the tasks of a burst share them).
      if v_key is distinct from v_t.task_type || v_t.requires::text then
        v_key := v_t.task_type || v_t.requires::text;
        v_models := array(select jsonb_array_elements_text(coalesce(v_t.requires->'models', '[]')));
        select coalesce(array_agg(ordo_worker_fits(w.status, w.last_seen_at, w.ttl_ms, w.task_types, w.gpu_count,
            w.vram_bytes, w.cpu, w.memory_bytes, w.models, w.labels, v_t.task_type, v_t.requires) order by w.ordinality), '{}'),
          coalesce(array_agg(cardinality(v_models) > 0 and w.loaded @> v_models order by w.ordinality), '{}')
        into v_fit, v_warm
        from unnest(v_ws) with ordinality as w;
      end if;
      v_best := null;
      -- The best candidate by the strategy's order (k1, k2, then worker id: the array's order).
      for v_i in 1 .. array_length(v_ws, 1) loop
        continue when v_held[v_i] >= v_max[v_i] or not v_fit[v_i];
        v_k1 := case
          when v_t.strategy = 'default' then
            case when v_last[v_i] is not distinct from v_t.task_type or v_warm[v_i] then 0 else 1 end
          when v_t.strategy = 'round_robin' then
            case when v_rr is not null and v_id[v_i] <= v_rr then 1 else 0 end
          else 0 end;
        v_k2 := case v_t.strategy
          when 'default' then v_cost[v_i]
          when 'cheapest' then v_cost[v_i]
          when 'least_connections' then v_held[v_i]
          when 'best_value' then (v_cost[v_i] / greatest(v_score[v_i], 0.001))::numeric
          else 0 end;
        if v_best is null or v_k1 < v_b1 or (v_k1 = v_b1 and v_k2 < v_b2) then
          v_best := v_i;
          v_b1 := v_k1;
          v_b2 := v_k2;
        end if;
      end loop;
      continue when v_best is null;
      v_a_task := v_a_task || v_t.task_id;
      v_a_worker := v_a_worker || v_id[v_best];
      v_a_deliver := v_a_deliver || (v_room[v_best] > 0);
      v_room[v_best] := v_room[v_best] - 1;
      v_held[v_best] := v_held[v_best] + 1;
      v_last[v_best] := v_t.task_type;
      if v_t.strategy = 'round_robin' then
        v_rr := v_id[v_best];
        v_rr_moved := true;
      end if;
      v_free := v_free - 1;
    end loop;
  end if;
  if cardinality(v_a_task) = 0 then
    return;
  end if;

  -- The choices, in the order made (assigned_at keeps it), delivered at once to takers with room;
  -- each task's timeout runs from here, the time it is written (after any wait for the pool's lock;
  -- a task opened before timeout_ms keeps its deadline).
  return query
    with u as (
      update worker_task t set worker_id = a.worker_id,
        status = case when a.deliver then 'delivered' else 'assigned' end,
        assigned_at = v_now + make_interval(secs => a.ord / 1000000.0),
        deadline = coalesce(clock_timestamp() + make_interval(secs => t.timeout_ms::numeric / 1000), t.deadline),
        delivered_at = case when a.deliver then v_now end
      from unnest(v_a_task, v_a_worker, v_a_deliver) with ordinality as a(task_id, worker_id, deliver, ord)
      -- (The keys as an array too: whichever side a plan starts from, it reaches the tasks by key,
      -- never through all of the tenant's.)
      where t.tenant_id = p_tenant and t.task_id = any (v_a_task) and t.task_id = a.task_id
      returning t.*
    )
    select to_jsonb(u) from u where u.status = 'delivered';
  update worker w set last_task_type = x.last
  from unnest(v_id, v_last) as x(worker_id, last)
  where w.tenant_id = p_tenant and w.worker_id = x.worker_id and x.last is distinct from w.last_task_type;
  if v_rr_moved then
    insert into worker_pool (tenant_id, pool, rr_last) values (p_tenant, p_pool, v_rr)
    on conflict (tenant_id, pool) do update set rr_last = excluded.rr_last;
  end if;
  perform ordo_notify('ordo_task', jsonb_build_array(p_tenant, a.worker_id)::text)
  from (select distinct x.worker_id from unnest(v_a_worker, v_a_deliver) as x(worker_id, deliver) where not x.deliver) a
  order by a.worker_id;
end
$$;

revoke all on function ordo_task_dispatch(text, text, jsonb, uuid[]) from public;
grant all on function ordo_task_dispatch(text, text, jsonb, uuid[]) to ordo_system;
