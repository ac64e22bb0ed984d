-- Decisions on waiting steps (an approval's decision, a signal, an external worker's result), in one
-- statement and one commit: `p` holds one (`result`, `decided`) or several (`items`: [{result,
-- decided}]), with their `artifacts`. The results' runs are locked in key order; a result whose step
-- no longer waits at its epoch gets one row ('refused', {tenant_id, run_id, step_id, status, epoch})
-- and nothing of it is written. For the others, each decision is appended to its run as its own event
-- (`decided`: type and data, canonical JSON), in the order given, the steps resume running at their
-- epoch, and their results (as a worker reports them) are applied together by ordo_engine_advance,
-- which ends the steps and moves the runs on. Returns what ordo_engine_advance returns, and the
-- refusals. Nothing is dispatched to the caller unless `p` holds `handOver` ({worker, leaseMs,
-- capacity, cap, sharedCap, only}): then successors that become ready and are steps of plugin
-- `only` are dispatched to `worker` as a worker's results would have them (the api hands queue
-- steps over to their tasks in the same transaction).

create or replace function ordo_engine_resolve(p jsonb) returns table (kind text, item jsonb)
  language plpgsql
  set jit = off
  set plan_cache_mode = force_generic_plan
  set enable_seqscan = off
  set enable_hashjoin = off
  set enable_mergejoin = off
  as $$
declare
  v_now timestamptz := date_trunc('milliseconds', now());
  v_items jsonb := coalesce(p->'items', jsonb_build_array(jsonb_build_object('result', p->'result', 'decided', p->'decided')));
  v_ok jsonb;
  v_ch ordo_adv_chained[];
begin
  perform 1 from run x
  where (x.tenant_id, x.run_id) in (
    select i->'result'->>'tenant_id', (i->'result'->>'run_id')::uuid from jsonb_array_elements(v_items) i)
  order by x.tenant_id, x.run_id
  for update of x;

  return query
    select 'refused'::text, jsonb_build_object('tenant_id', r->>'tenant_id', 'run_id', r->>'run_id',
      'step_id', r->>'step_id', 'status', s.status, 'epoch', s.epoch)
    from jsonb_array_elements(v_items) with ordinality as i(v, n)
    cross join lateral (select i.v->'result' as r) x
    left join step s on s.tenant_id = x.r->>'tenant_id' and s.run_id = (x.r->>'run_id')::uuid and s.step_id = x.r->>'step_id'
    where s.status is distinct from 'waiting' or s.epoch <> (x.r->>'epoch')::integer
    order by i.n;

  -- The results whose step still waits at their epoch, in the order given, with its attempt.
  select coalesce(jsonb_agg(jsonb_build_object('result', x.r || jsonb_build_object('attempt', s.attempts, 'ord', i.n),
      'decided', i.v->'decided') order by i.n), '[]')
  into v_ok
  from jsonb_array_elements(v_items) with ordinality as i(v, n)
  cross join lateral (select i.v->'result' as r) x
  join step s on s.tenant_id = x.r->>'tenant_id' and s.run_id = (x.r->>'run_id')::uuid and s.step_id = x.r->>'step_id'
  where s.status = 'waiting' and s.epoch = (x.r->>'epoch')::integer;
  if jsonb_array_length(v_ok) = 0 then
    return;
  end if;

  v_ch := ordo_append_events(array(
    select row(o->'result'->>'tenant_id', (o->'result'->>'run_id')::uuid, (o->'result'->>'ord')::integer,
      o->'decided'->>'type', o->'result'->>'step_id', (o->'result'->>'attempt')::integer, o->'result'->>'actor',
      o->'decided'->>'data')::ordo_adv_event
    from jsonb_array_elements(v_ok) o
  ), v_now);
  update run x set event_seq = e.seq, event_hash = e.hash
  from ordo_event_heads(v_ch) e
  where x.tenant_id = e.tenant_id and x.run_id = e.run_id;
  update step s set status = 'running'
  from jsonb_array_elements(v_ok) o
  where s.tenant_id = o->'result'->>'tenant_id' and s.run_id = (o->'result'->>'run_id')::uuid
    and s.step_id = o->'result'->>'step_id';

  return query
    select a.kind, a.item from ordo_engine_advance(coalesce(p->'handOver', jsonb_build_object(
      'worker', coalesce(v_ok->0->'result'->>'actor', 'engine'), 'leaseMs', 0, 'capacity', 0, 'cap', 0)) || jsonb_build_object(
      'results', (select jsonb_agg(o->'result') from jsonb_array_elements(v_ok) o),
      'artifacts', coalesce(p->'artifacts', '[]'))) a;
end
$$;

revoke all on function ordo_engine_resolve(p jsonb) from public;
grant all on function ordo_engine_resolve(p jsonb) to ordo_system;
