-- The concurrency gate a queued step waits under: its DAG and step id (so every version of the DAG
-- shares it) when its spec has a concurrency limit, else none. The claim takes a gated step only
-- while fewer of its gate's steps run than its limit (ordo_engine_claim).

create or replace function ordo_step_gate(p_dag text, p_step text, p_spec jsonb) returns text
  language sql immutable parallel safe
  as $$ select case when p_spec->>'concurrency' is not null then p_dag || '/' || p_step end $$;

grant all on function ordo_step_gate(text, text, jsonb) to ordo_system, ordo_app;
