-- The hash of an event chained after `p_prev`: SHA-256 of p_prev and the event's canonical JSON
-- body (RFC 8785: keys in order actor, attempt, createdAt, data, runId, seq, stepId, type), given
-- its data already in canonical form. The reference is src/modules/runs/run-events.ts (chainHash
-- of hashedBody, which the offline verifier uses); test/medium/event-hash.test.ts holds the two
-- together on generated events. Declared stable, as its body is (to_json), so that PostgreSQL
-- inlines it into the expression that calls it.

create or replace function ordo_event_hash(
  p_prev text, p_run uuid, p_seq integer, p_created text, p_type text, p_step text, p_attempt integer, p_actor text,
  p_data text
) returns text
  language sql stable parallel safe
  as $$
    select encode(sha256(convert_to(p_prev
      || '{"actor":' || to_json(p_actor)::text
      || ',"attempt":' || coalesce(p_attempt::text, 'null')
      || ',"createdAt":' || to_json(p_created)::text
      || ',"data":' || p_data
      || ',"runId":' || to_json(p_run::text)::text
      || ',"seq":' || p_seq::text
      || ',"stepId":' || coalesce(to_json(p_step)::text, 'null')
      || ',"type":' || to_json(p_type)::text
      || '}', 'UTF8')), 'hex')
  $$;

revoke all on function ordo_event_hash(text, uuid, integer, text, text, text, integer, text, text) from public;
grant all on function ordo_event_hash(text, uuid, integer, text, text, text, integer, text, text) to ordo_system, ordo_app;
