-- A tenant's cap of steps in flight for a claim or a hop: its plan's cap (tenant_queue.max_in_flight)
-- or else the instance's (`cap` in the engine call); while tenants share the engine (`sharedCap`
-- in the call, set by the worker), at most the shared cap times the tenant's fair-share weight, so
-- tenants that all reach their caps still progress in proportion to their weights. The one home
-- of the per-tenant cap: the claim, the advance and the chain call it with the tenant's queue row.

create or replace function ordo_in_flight_cap(p_max_in_flight integer, p_weight integer, p jsonb) returns integer
  language sql
  immutable
  as $$
  select least(
    coalesce(p_max_in_flight, (p->>'cap')::integer),
    coalesce((p->>'sharedCap')::integer * coalesce(p_weight, 1), 2147483647)
  )
$$;
