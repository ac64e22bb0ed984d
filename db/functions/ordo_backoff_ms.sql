-- The wait before retry n (1 for the first) of a step with retry policy `p_policy` ({maxRetries,
-- initialDelay, multiplier, maxDelay}, milliseconds): initialDelay × multiplier^(n-1), rounded,
-- capped at maxDelay.

create or replace function ordo_backoff_ms(p_policy jsonb, p_retry integer) returns integer
  language sql immutable parallel safe
  as $$
    select least(
      (p_policy->>'maxDelay')::numeric,
      round((p_policy->>'initialDelay')::numeric * power((p_policy->>'multiplier')::numeric, greatest(0, p_retry - 1)))
    )::integer
  $$;

revoke all on function ordo_backoff_ms(jsonb, integer) from public;
grant all on function ordo_backoff_ms(jsonb, integer) to ordo_system;
