-- A map step's fan-out, inside ordo_engine_advance: each map step handed back as waiting at its
-- epoch with its elements (`p_maps`: tenant_id, run_id, step_id, epoch, items) gets one instance
-- per element, `<step>[<index>]`, queued in index order. An instance is an ordinary step row (the
-- map step's plugin, config, dependencies and spec, without map, maxParallel and when, with
-- mapOf, mapIndex and its element as item), so claims, leases, fencing, attempts, retries and
-- events work per instance unchanged. Under maxParallel the instances wait under one gate of their
-- run and map step (spec.gate, limit maxParallel; see ordo_step_gate). The map step counts its
-- instances down (map_size, map_left; ordo_map_join ends it) and the run counts them as steps.
-- Returns the instances' step.queued events, after the batch's other events, in index order.

create or replace function ordo_map_expand(p_maps jsonb, p_c ordo_adv_result[]) returns ordo_adv_event[]
  language plpgsql
  set jit = off
  as $$
declare
  v_e ordo_adv_event[];
begin
  with m as (
    select s.tenant_id, s.run_id, s.step_id, s.plugin, s.config, s.spec, s.depends_on, s.topo_index, r.dag_id, c.ord, x.items
    from jsonb_to_recordset(p_maps) as x(tenant_id text, run_id uuid, step_id text, epoch integer, items jsonb)
    join unnest(p_c) c on c.tenant_id = x.tenant_id and c.run_id = x.run_id and c.step_id = x.step_id
      and c.epoch = x.epoch and c.outcome = 'waiting'
    join step s on s.tenant_id = x.tenant_id and s.run_id = x.run_id and s.step_id = x.step_id
      and s.status = 'waiting' and s.epoch = x.epoch
    join run r on r.tenant_id = x.tenant_id and r.run_id = x.run_id
  ),
  i as (
    select m.tenant_id, m.run_id, m.step_id as map_of, m.step_id || '[' || (e.n - 1) || ']' as step_id, m.ord,
      (e.n - 1)::integer as idx, m.plugin, m.config, m.depends_on, m.topo_index, m.dag_id,
      (m.spec - 'map' - 'maxParallel' - 'when' - 'concurrency')
        || jsonb_build_object('mapOf', m.step_id, 'mapIndex', e.n - 1, 'item', e.item)
        || case when m.spec ? 'maxParallel' then jsonb_build_object('concurrency', m.spec->'maxParallel',
             'gate', 'map/' || m.run_id::text || '/' || m.step_id) else '{}'::jsonb end as spec
    from m cross join lateral jsonb_array_elements(m.items) with ordinality as e(item, n)
  ),
  st as (
    insert into step (tenant_id, run_id, step_id, status, plugin, config, spec, depends_on, topo_index, pending_deps,
      queued_at)
    select i.tenant_id, i.run_id, i.step_id, 'queued', i.plugin, i.config, i.spec, i.depends_on, i.topo_index, 0, now()
    from i
    returning 1
  ),
  q as (
    insert into queue_item (tenant_id, run_id, step_id, gate, gate_limit, priority)
    select i.tenant_id, i.run_id, i.step_id, ordo_step_gate(i.dag_id, i.map_of, i.spec), (i.spec->>'concurrency')::integer,
      coalesce((i.spec->>'priority')::smallint, 5)
    from i
    order by i.tenant_id, i.run_id, i.ord, i.idx
    returning 1
  ),
  ms as (
    update step s set map_size = k.n, map_left = k.n
    from (select i.tenant_id, i.run_id, i.map_of, count(*)::integer as n from i group by 1, 2, 3) k
    where s.tenant_id = k.tenant_id and s.run_id = k.run_id and s.step_id = k.map_of
    returning 1
  ),
  ru as (
    update run x set steps_total = x.steps_total + k.n, steps_remaining = x.steps_remaining + k.n
    from (select i.tenant_id, i.run_id, count(*)::integer as n from i group by 1, 2) k
    where x.tenant_id = k.tenant_id and x.run_id = k.run_id
    returning 1
  )
  select coalesce(array_agg(row(i.tenant_id, i.run_id, 4000000 + i.ord * 10001 + i.idx, 'step.queued', i.step_id,
      null, 'engine', '{}')::ordo_adv_event order by i.tenant_id, i.run_id, i.ord, i.idx), '{}')
  into v_e
  from i;

  perform ordo_notify('ordo_ready', n.tenant_id) from (select distinct e.tenant_id from unnest(v_e) e) n;
  return v_e;
end
$$;

revoke all on function ordo_map_expand(jsonb, ordo_adv_result[]) from public;
grant all on function ordo_map_expand(jsonb, ordo_adv_result[]) to ordo_system;
