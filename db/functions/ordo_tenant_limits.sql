-- A tenant's effective limits: its plan's limits with its overrides on top (a key absent: no limit
-- of that kind from the plan), its plan and its quota time zone. No row: the tenant has no plan.
-- The one home of how a plan and its overrides combine.

create or replace function ordo_tenant_limits(p_tenant text)
  returns table (plan_id text, limits jsonb, time_zone text)
  language sql
  stable
  as $$
  select tp.plan_id, p.limits || tp.overrides, tp.time_zone
  from tenant_plan tp join plan p on p.id = tp.plan_id
  where tp.tenant_id = p_tenant
$$;
