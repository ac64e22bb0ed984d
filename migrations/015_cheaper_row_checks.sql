-- Cheaper checks on the rows the engine writes most (every run, step and attempt update, every
-- event, span and artifact). Same rules, same names, same errors; what changed is their cost:
--   - a status change is checked by the trigger's WHEN clause against a constant list generated
--     from state_transition (an inlined expression), instead of a PL/pgSQL call and an index
--     lookup per updated row; the trigger function only runs to refuse a change;
--   - the hex formats are checked as "n bytes, none outside [0-9a-f]", instead of the pattern
--     '^[0-9a-f]{n}$', whose bounded repetition costs PostgreSQL's regex engine ~5 µs a value;
--   - ordo_events_out is PL/pgSQL, so its statement is planned once per connection instead of on
--     every call (a SQL function with SET clauses is never inlined).

-- Whether a status change is allowed: state_transition as a constant (immutable, inlined where
-- it is called). Generated here from the table; a migration that changes the table regenerates
-- it (a test compares the two for every pair of states).
do $$
declare
  v_list text;
begin
  select string_agg(quote_literal(entity || ':' || from_state || '>' || to_state), ', '
    order by entity, from_state, to_state)
  into v_list
  from state_transition;
  execute format($f$
    create function ordo_transition_allowed(p_entity text, p_from text, p_to text) returns boolean
      language sql immutable parallel safe
      as $b$ select p_entity || ':' || p_from || '>' || p_to = any (array[%s]::text[]) $b$
  $f$, v_list);
end
$$;

create function ordo_refuse_transition() returns trigger
  language plpgsql
  as $$
begin
  raise exception 'illegal % transition % -> %', tg_argv[0], old.status, new.status
    using errcode = 'check_violation', hint = 'illegal_transition';
end
$$;

drop trigger run_transition on run;
create trigger run_transition before update of status on run
  for each row
  when (old.status is distinct from new.status and not ordo_transition_allowed('run', old.status, new.status))
  execute function ordo_refuse_transition('run');
drop trigger step_transition on step;
create trigger step_transition before update of status on step
  for each row
  when (old.status is distinct from new.status and not ordo_transition_allowed('step', old.status, new.status))
  execute function ordo_refuse_transition('step');
drop trigger attempt_transition on attempt;
create trigger attempt_transition before update of status on attempt
  for each row
  when (old.status is distinct from new.status and not ordo_transition_allowed('attempt', old.status, new.status))
  execute function ordo_refuse_transition('attempt');
drop function ordo_check_transition();

-- Hex formats: exactly n bytes, none of them outside [0-9a-f] (so n ASCII hex digits).
alter table run drop constraint run_trace_id_check,
  add constraint run_trace_id_check check (octet_length(trace_id) = 32 and trace_id !~ '[^0-9a-f]');
alter table run drop constraint run_inputs_hash_format,
  add constraint run_inputs_hash_format check (octet_length(inputs_hash) = 64 and inputs_hash !~ '[^0-9a-f]');
alter table run_event drop constraint run_event_hash_check,
  add constraint run_event_hash_check check (octet_length(hash) = 64 and hash !~ '[^0-9a-f]');
alter table artifact drop constraint artifact_sha256_check,
  add constraint artifact_sha256_check check (octet_length(sha256) = 64 and sha256 !~ '[^0-9a-f]');
alter table span drop constraint span_trace_id_check,
  add constraint span_trace_id_check check (octet_length(trace_id) = 32 and trace_id !~ '[^0-9a-f]');
alter table span drop constraint span_span_id_check,
  add constraint span_span_id_check check (octet_length(span_id) = 16 and span_id !~ '[^0-9a-f]');
alter table dag_version drop constraint dag_version_hash_format,
  add constraint dag_version_hash_format check (octet_length(content_hash) = 64 and content_hash !~ '[^0-9a-f]');

create or replace function ordo_events_out(p_ch ordo_adv_chained[], p_at timestamptz) returns setof jsonb
  language plpgsql stable
  set plan_cache_mode = force_generic_plan
  set enable_seqscan = off
  set enable_hashjoin = off
  set enable_mergejoin = off
  as $$
begin
  return query
    select jsonb_build_object('tenantId', e.tenant_id, 'runId', e.run_id, 'seq', e.seq,
      'createdAt', to_char(p_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
      'type', e.type, 'stepId', e.step_id, 'attempt', e.attempt, 'actor', e.actor, 'data', e.data::jsonb,
      'prevHash', e.prev_hash, 'hash', e.hash, 'dagId', x.dag_id, 'traceId', x.trace_id, 'startedAt', x.started_at)
    from unnest(p_ch) e join run x on x.tenant_id = e.tenant_id and x.run_id = e.run_id
    where e.type like 'run.%' or e.type = 'step.retrying'
    order by e.tenant_id, e.run_id, e.seq;
end
$$;
