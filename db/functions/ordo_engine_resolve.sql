-- A decision on a waiting step (an approval step), in one statement and one commit: the step must
-- still wait at the given epoch (else one row ('refused', {status}) and nothing is written). The
-- decision is appended to the run as its own event (`decided`: type and data, canonical JSON), the
-- step resumes running at its epoch, and its result (`result`, as a worker reports one, with its
-- artifacts) is applied by ordo_engine_advance, which ends the step and moves the run on. Returns
-- what ordo_engine_advance returns; nothing is dispatched to the caller (capacity 0).

create or replace function ordo_engine_resolve(p jsonb) returns table (kind text, item jsonb)
  language plpgsql
  set jit = off
  as $$
declare
  v_now timestamptz := date_trunc('milliseconds', now());
  v_r jsonb := p->'result';
  v_t text := v_r->>'tenant_id';
  v_run uuid := (v_r->>'run_id')::uuid;
  v_s text := v_r->>'step_id';
  v_status text;
  v_epoch integer;
  v_attempt integer;
  v_ch ordo_adv_chained[];
begin
  perform 1 from run x where x.tenant_id = v_t and x.run_id = v_run for update;
  select s.status, s.epoch, s.attempts into v_status, v_epoch, v_attempt
  from step s where s.tenant_id = v_t and s.run_id = v_run and s.step_id = v_s;
  if v_status is distinct from 'waiting' or v_epoch <> (v_r->>'epoch')::integer then
    return query select 'refused'::text, jsonb_build_object('status', v_status, 'epoch', v_epoch);
    return;
  end if;

  v_ch := ordo_append_events(array[row(v_t, v_run, 0, p->'decided'->>'type', v_s, v_attempt, v_r->>'actor',
    p->'decided'->>'data')::ordo_adv_event], v_now);
  update run x set event_seq = e.seq, event_hash = e.hash
  from unnest(v_ch) e where x.tenant_id = e.tenant_id and x.run_id = e.run_id;
  update step s set status = 'running'
  where s.tenant_id = v_t and s.run_id = v_run and s.step_id = v_s;

  return query
    select a.kind, a.item from ordo_engine_advance(jsonb_build_object(
      'worker', v_r->>'actor', 'leaseMs', 0, 'capacity', 0, 'cap', 0,
      'results', jsonb_build_array(v_r || jsonb_build_object('attempt', v_attempt, 'ord', 1)),
      'artifacts', coalesce(p->'artifacts', '[]'))) a;
end
$$;

revoke all on function ordo_engine_resolve(p jsonb) from public;
grant all on function ordo_engine_resolve(p jsonb) to ordo_system;
