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
-- Each assigned worker is notified (ordo_task, [tenant, worker]). Returns how many were assigned.

create or replace function ordo_task_dispatch(p_tenant text, p_pool text) returns integer
  language plpgsql
  set jit = off
  as $$
declare
  v_t record;
  v_w uuid;
  v_n integer := 0;
  v_strategy text;
  v_rr uuid;
  v_rr_moved boolean := false;
  v_models text[];
  v_free bigint;
begin
  perform pg_advisory_xact_lock(hashtextextended(jsonb_build_array('ordo_task_dispatch', p_tenant, p_pool)::text, 31));
  select wp.strategy, wp.rr_last into v_strategy, v_rr from worker_pool wp
  where wp.tenant_id = p_tenant and wp.pool = p_pool;
  -- The free slots of the pool's live workers: with none, no pending task is looked at.
  select coalesce(sum(greatest(w.max_concurrent - (
      select count(*) from worker_task h
      where h.tenant_id = w.tenant_id and h.worker_id = w.worker_id and h.status in ('assigned', 'delivered')), 0)), 0)
  into v_free
  from worker w
  left join worker_reputation r on r.tenant_id = w.tenant_id and r.pool = w.pool and r.name = w.name
  where w.tenant_id = p_tenant and w.pool = p_pool and w.status = 'online'
    and w.last_seen_at + make_interval(secs => w.ttl_ms::numeric / 1000) > now() and r.blocked_at is null;
  if v_free <= 0 then
    return 0;
  end if;
  for v_t in
    select t.task_id, t.task_type, t.requires, coalesce(t.strategy, v_strategy, 'default') as strategy
    from worker_task t
    where t.tenant_id = p_tenant and t.pool = p_pool and t.status = 'pending'
    order by t.priority desc, t.created_at, t.task_id
    for update of t skip locked
  loop
    exit when v_free <= 0;
    v_models := array(select jsonb_array_elements_text(coalesce(v_t.requires->'models', '[]')));
    select w.worker_id into v_w
    from worker w
    left join worker_reputation r on r.tenant_id = w.tenant_id and r.pool = w.pool and r.name = w.name
    cross join lateral (
      select count(*)::integer as held from worker_task h
      where h.tenant_id = w.tenant_id and h.worker_id = w.worker_id and h.status in ('assigned', 'delivered')
    ) h
    where w.tenant_id = p_tenant and w.pool = p_pool and w.status = 'online'
      and ordo_worker_fits(w.status, w.last_seen_at, w.ttl_ms, w.task_types, w.gpu_count, w.vram_bytes, w.cpu,
        w.memory_bytes, w.models, w.labels, v_t.task_type, v_t.requires)
      and r.blocked_at is null
      and h.held < w.max_concurrent
    order by
      case when v_t.strategy = 'default' then
        not (w.last_task_type is not distinct from v_t.task_type or (cardinality(v_models) > 0 and w.loaded @> v_models))
      end,
      case when v_t.strategy in ('default', 'cheapest') then w.cost_per_second end,
      case when v_t.strategy = 'least_connections' then h.held end,
      case when v_t.strategy = 'best_value' then w.cost_per_second / greatest(coalesce(r.score, 0.5), 0.001) end,
      case when v_t.strategy = 'round_robin' then v_rr is not null and w.worker_id <= v_rr end,
      w.worker_id
    limit 1;
    continue when v_w is null;
    update worker_task t set status = 'assigned', worker_id = v_w, assigned_at = clock_timestamp()
    where t.tenant_id = p_tenant and t.task_id = v_t.task_id;
    update worker w set last_task_type = v_t.task_type
    where w.tenant_id = p_tenant and w.worker_id = v_w and w.last_task_type is distinct from v_t.task_type;
    if v_t.strategy = 'round_robin' then
      v_rr := v_w;
      v_rr_moved := true;
    end if;
    perform ordo_notify('ordo_task', jsonb_build_array(p_tenant, v_w)::text);
    v_n := v_n + 1;
    v_free := v_free - 1;
  end loop;
  if v_rr_moved then
    insert into worker_pool (tenant_id, pool, rr_last) values (p_tenant, p_pool, v_rr)
    on conflict (tenant_id, pool) do update set rr_last = excluded.rr_last;
  end if;
  return v_n;
end
$$;

revoke all on function ordo_task_dispatch(text, text) from public;
grant all on function ordo_task_dispatch(text, text) to ordo_system;
