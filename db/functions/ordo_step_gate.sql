-- The concurrency gate a queued step waits under: its DAG and step id (so every version of the DAG
-- shares it) when its spec has a concurrency limit, else none; a map instance under maxParallel
-- names its own (spec.gate: its run and map step, see ordo_map_expand). The claim takes a gated
-- step only while fewer of its gate's steps run than its limit (ordo_engine_claim).

create or replace function ordo_step_gate(p_dag text, p_step text, p_spec jsonb) returns text
  language sql immutable parallel safe
  as $$ select case when p_spec->>'concurrency' is not null then coalesce(p_spec->>'gate', p_dag || '/' || p_step) end $$;

grant all on function ordo_step_gate(text, text, jsonb) to ordo_system, ordo_app;
