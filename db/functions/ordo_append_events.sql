-- Appends events to their runs' hash chains: numbers each after its run's last event, hashes it
-- over its canonical body chained to the one before (ordo_event_hash), inserts them, and returns
-- them chained. Events of one run are appended in their `ord` order.

create or replace function ordo_append_events(p_events ordo_adv_event[], p_at timestamptz) returns ordo_adv_chained[]
  language plpgsql
  set plan_cache_mode = force_generic_plan
  set enable_seqscan = off
  set enable_hashjoin = off
  set enable_mergejoin = off
  as $$
declare
  v_created text := to_char(p_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"');
  v_ch ordo_adv_chained[] := '{}';
  v_key text := '';
  v_seq integer;
  v_prev text;
  v_hash text;
  rec record;
begin
  for rec in
    select e.*, x.event_seq, x.event_hash
    from unnest(p_events) e join run x on x.tenant_id = e.tenant_id and x.run_id = e.run_id
    order by e.tenant_id, e.run_id, e.ord
  loop
    if rec.tenant_id || '/' || rec.run_id::text <> v_key then
      v_key := rec.tenant_id || '/' || rec.run_id::text;
      v_seq := rec.event_seq;
      v_prev := rec.event_hash;
    end if;
    v_seq := v_seq + 1;
    v_hash := ordo_event_hash(v_prev, rec.run_id, v_seq, v_created, rec.type, rec.step_id, rec.attempt, rec.actor, rec.data);
    v_ch := v_ch || row(rec.tenant_id, rec.run_id, v_seq, rec.type, rec.step_id, rec.attempt, rec.actor, rec.data, v_prev, v_hash)::ordo_adv_chained;
    v_prev := v_hash;
  end loop;
  insert into run_event (tenant_id, run_id, seq, created_at, type, step_id, attempt, actor, data, prev_hash, hash)
  select e.tenant_id, e.run_id, e.seq, p_at, e.type, e.step_id, e.attempt, e.actor, e.data::jsonb, e.prev_hash, e.hash
  from unnest(v_ch) e order by e.tenant_id, e.run_id, e.seq;
  return v_ch;
end
$$;

alter function ordo_append_events(ordo_adv_event[], timestamptz) set jit = off;

revoke all on function ordo_append_events(p_events ordo_adv_event[], p_at timestamp with time zone) from public;
grant all on function ordo_append_events(p_events ordo_adv_event[], p_at timestamp with time zone) to ordo_system, ordo_app;
