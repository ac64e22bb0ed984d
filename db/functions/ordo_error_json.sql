-- A step error as canonical JSON (RFC 8785: keys in code point order), as the events that carry it
-- (step.retrying, step.failed) hash it: code, message, retryable; an invalid_input error also says
-- its class and the input at fault. (A transient or permanent error's class is what its retryable
-- flag says, so it is not repeated: the events of such errors read as they always have.)

create or replace function ordo_error_json(p_error jsonb) returns text
  language sql immutable parallel safe
  as $$
    select case when p_error->>'class' = 'invalid_input' then '{"class":"invalid_input",' else '{' end
      || '"code":' || to_json(coalesce(p_error->>'code', 'ERROR'))::text
      || case when p_error->>'class' = 'invalid_input' and p_error ? 'input'
           then ',"input":' || to_json(p_error->>'input')::text else '' end
      || ',"message":' || to_json(coalesce(p_error->>'message', ''))::text
      || ',"retryable":' || coalesce((p_error->>'retryable')::boolean, false)::text || '}'
  $$;

revoke all on function ordo_error_json(jsonb) from public;
grant all on function ordo_error_json(jsonb) to ordo_system;
