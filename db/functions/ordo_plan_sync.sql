-- Copies the engine's share of the named tenants' effective limits into their queue rows, where
-- the claim reads them: the fair-share weight (`weight`, 1 without one) and the cap of steps in
-- flight (`maxStepsInFlight`, null: the instance's setting). Called in the transaction that changes
-- a plan, an assignment or overrides, so the engine applies them from that commit on.

create or replace function ordo_plan_sync(p_tenants text[]) returns void
  language sql
  as $$
  insert into tenant_queue (tenant_id, weight, max_in_flight)
  select t.id, coalesce((l.limits->>'weight')::integer, 1), (l.limits->>'maxStepsInFlight')::integer
  from tenant t left join lateral ordo_tenant_limits(t.id) l on true
  where t.id = any(p_tenants)
  on conflict (tenant_id) do update set weight = excluded.weight, max_in_flight = excluded.max_in_flight
  where (tenant_queue.weight, tenant_queue.max_in_flight) is distinct from (excluded.weight, excluded.max_in_flight)
$$;
