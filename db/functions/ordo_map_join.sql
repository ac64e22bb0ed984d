-- The end of map steps, inside ordo_engine_advance: each map instance among the results that ended
-- (succeeded, skipped, or failed with no retry left) counts down its map step (map_left). A map
-- step with none left ends like a step whose worker reported: it resumes running at its epoch and
-- its result is applied by ordo_engine_advance (capacity 0: its successors go through the queue),
-- actor `engine`. It succeeds when no instance failed, with outputs `{"results": [...]}`, its
-- instances' outputs in index order (null for a skipped one), and as outputs hash the SHA-256 of
-- the canonical JSON of its instances' outputs hashes in index order (`{"results":["<sha256>",…]}`,
-- null for a skipped one); otherwise it fails, MAP_INSTANCE_FAILED, not retried. Returns what
-- ordo_engine_advance returns (nothing when no map step ended).

create or replace function ordo_map_join(p_c ordo_adv_result[]) returns table (kind text, item jsonb)
  language plpgsql
  set jit = off
  as $$
declare
  v_r jsonb;
begin
  with k as (
    select c.tenant_id, c.run_id, left(c.step_id, strpos(c.step_id, '[') - 1) as step_id, count(*)::integer as n
    from unnest(p_c) c
    where right(c.step_id, 1) = ']' and (c.outcome in ('succeeded', 'skipped') or c.outcome like '%>failed')
    group by 1, 2, 3
  ),
  u as (
    update step s set map_left = s.map_left - k.n
    from k
    where s.tenant_id = k.tenant_id and s.run_id = k.run_id and s.step_id = k.step_id and s.status = 'waiting'
      and s.map_left is not null
    returning s.tenant_id, s.run_id, s.step_id, s.attempts, s.epoch, s.map_size, s.map_left
  )
  select jsonb_agg(jsonb_build_object('tenant_id', u.tenant_id, 'run_id', u.run_id, 'step_id', u.step_id,
      'attempt', u.attempts, 'epoch', u.epoch, 'actor', 'engine',
      'status', case when j.failed = 0 then 'succeeded' else 'failed' end,
      'outputs', case when j.failed = 0 then jsonb_build_object('results', j.results) end,
      'outputs_hash', case when j.failed = 0 then j.hash end,
      'error', case when j.failed > 0 then jsonb_build_object('code', 'MAP_INSTANCE_FAILED',
        'message', j.failed || ' of ' || u.map_size || ' instances failed (the first: ' || u.step_id || '['
          || j.first_failed || '])', 'retryable', false) end)
    order by u.tenant_id, u.run_id, u.step_id)
  into v_r
  from u
  cross join lateral (
    select coalesce(jsonb_agg(case when i.status = 'succeeded' then coalesce(i.outputs, (
          select a.body_json from artifact a where a.tenant_id = i.tenant_id and a.sha256 = i.outputs_hash limit 1
        ), '{}'::jsonb) end order by g.n), '[]'::jsonb) as results,
      count(*) filter (where i.status = 'failed')::integer as failed,
      min(g.n) filter (where i.status = 'failed') as first_failed,
      encode(sha256(convert_to('{"results":[' || coalesce(string_agg(case when i.status = 'succeeded'
        then to_json(i.outputs_hash)::text else 'null' end, ',' order by g.n), '') || ']}', 'UTF8')), 'hex') as hash
    from generate_series(0, u.map_size - 1) as g(n)
    join step i on i.tenant_id = u.tenant_id and i.run_id = u.run_id and i.step_id = u.step_id || '[' || g.n || ']'
  ) j
  where u.map_left = 0;
  if v_r is null then
    return;
  end if;

  update step s set status = 'running'
  from jsonb_to_recordset(v_r) as x(tenant_id text, run_id uuid, step_id text)
  where s.tenant_id = x.tenant_id and s.run_id = x.run_id and s.step_id = x.step_id and s.status = 'waiting';

  return query
    select a.kind, a.item from ordo_engine_advance(jsonb_build_object(
      'worker', 'engine', 'leaseMs', 0, 'capacity', 0, 'cap', 0,
      'results', (select jsonb_agg(r || jsonb_build_object('ord', n)) from jsonb_array_elements(v_r) with ordinality as x(r, n)),
      'artifacts', '[]'::jsonb)) a;
end
$$;

revoke all on function ordo_map_join(ordo_adv_result[]) from public;
grant all on function ordo_map_join(ordo_adv_result[]) to ordo_system;
