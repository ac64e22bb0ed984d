-- A step error as canonical JSON (RFC 8785: keys code, message, retryable in that order), as the
-- events that carry it (step.retrying, step.failed) hash it.

create or replace function ordo_error_json(p_error jsonb) returns text
  language sql immutable parallel safe
  as $$
    select '{"code":' || to_json(coalesce(p_error->>'code', 'ERROR'))::text
      || ',"message":' || to_json(coalesce(p_error->>'message', ''))::text
      || ',"retryable":' || coalesce((p_error->>'retryable')::boolean, false)::text || '}'
  $$;

revoke all on function ordo_error_json(jsonb) from public;
grant all on function ordo_error_json(jsonb) to ordo_system;
