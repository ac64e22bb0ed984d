-- Tenant plans: a plan is a named set of limits; a tenant has at most one plan and may have
-- per-tenant overrides of its limits. A tenant without a plan has no plan limits (the instance's
-- settings apply). The limits' shape and bounds are checked by the application (plan-limits.ts);
-- the effective limits are `plan.limits || tenant_plan.overrides` (ordo_tenant_limits).

create table plan (
  id text not null,
  description text not null default '',
  limits jsonb not null default '{}',
  created_at timestamptz not null default date_trunc('milliseconds', now()),
  updated_at timestamptz not null default date_trunc('milliseconds', now()),
  constraint plan_pk primary key (id),
  constraint plan_id_format check (id ~ '^[a-z0-9][a-z0-9._-]{0,62}$'),
  constraint plan_limits_object check (jsonb_typeof(limits) = 'object')
);

create table tenant_plan (
  tenant_id text not null references tenant (id),
  plan_id text not null references plan (id),
  -- Limits of this tenant that differ from its plan's (a key present overrides the plan's value).
  overrides jsonb not null default '{}',
  -- The IANA time zone whose calendar months bound the monthly run quota.
  time_zone text not null default 'UTC',
  updated_at timestamptz not null default date_trunc('milliseconds', now()),
  constraint tenant_plan_pk primary key (tenant_id),
  constraint tenant_plan_overrides_object check (jsonb_typeof(overrides) = 'object')
);
create index tenant_plan_plan_idx on tenant_plan (plan_id);
alter table tenant_plan enable row level security;
alter table tenant_plan force row level security;
create policy tenant_isolation on tenant_plan using (tenant_id = ordo_current_tenant())
  with check (tenant_id = ordo_current_tenant());
grant select on table tenant_plan to ordo_app;
grant select, insert, update, delete on table tenant_plan to ordo_system;

-- A tenant reads its own plan only.
alter table plan enable row level security;
alter table plan force row level security;
create policy tenant_plan_only on plan for select to ordo_app
  using (id = (select tp.plan_id from tenant_plan tp where tp.tenant_id = ordo_current_tenant()));
grant select on table plan to ordo_app;
grant select, insert, update, delete on table plan to ordo_system;

-- Runs created per tenant per quota period (the first day of a calendar month in the tenant's time
-- zone). Only creations count: a run token repeated is not a creation.
create table tenant_usage (
  tenant_id text not null references tenant (id),
  period_start date not null,
  runs_created bigint not null default 0,
  constraint tenant_usage_pk primary key (tenant_id, period_start),
  constraint tenant_usage_runs_check check (runs_created >= 0)
);
alter table tenant_usage enable row level security;
alter table tenant_usage force row level security;
create policy tenant_isolation on tenant_usage using (tenant_id = ordo_current_tenant())
  with check (tenant_id = ordo_current_tenant());
grant select, insert, update on table tenant_usage to ordo_app;
grant select, insert, update on table tenant_usage to ordo_system;

-- The engine's per-tenant cap of steps in flight, from the tenant's plan (null: the instance's
-- setting). The weight (already here) is the plan's fair-share weight.
alter table tenant_queue add column max_in_flight integer;
alter table tenant_queue add constraint tenant_queue_max_in_flight_check
  check (max_in_flight is null or (max_in_flight >= 1 and max_in_flight <= 100000));

-- The API rate limiter's counters in PostgreSQL (rate-limiter-flexible's table layout); keys name
-- the tenant or the token they count. Used through the system role only.
create table rate_limit (
  key varchar(255) not null,
  points integer not null default 0,
  expire bigint,
  constraint rate_limit_pk primary key (key)
);
grant select, insert, update, delete on table rate_limit to ordo_system;

-- Limits hit, per tenant, limit and minute (written in batches by each api process).
create table limit_hit (
  tenant_id text not null references tenant (id),
  limit_name text not null,
  minute timestamptz not null,
  hits bigint not null,
  constraint limit_hit_pk primary key (tenant_id, limit_name, minute)
);
create index limit_hit_minute_idx on limit_hit (minute);
alter table limit_hit enable row level security;
alter table limit_hit force row level security;
create policy tenant_isolation on limit_hit using (tenant_id = ordo_current_tenant())
  with check (tenant_id = ordo_current_tenant());
grant select, insert, update, delete on table limit_hit to ordo_system;

-- What operators did to plans, limits and usage: append-only and hash-chained (each entry's hash
-- covers the previous one's), exported as signed NDJSON.
create table operator_audit (
  seq bigint not null,
  at timestamptz not null default date_trunc('milliseconds', now()),
  -- The operator token's subject and id.
  actor text not null,
  token_jti text not null,
  action text not null,
  tenant_id text references tenant (id),
  plan_id text,
  reason text,
  detail jsonb not null default '{}',
  prev_hash text not null,
  hash text not null,
  constraint operator_audit_pk primary key (seq),
  constraint operator_audit_hash_check check (octet_length(hash) = 64)
);
create index operator_audit_tenant_idx on operator_audit (tenant_id, seq);
grant select, insert on table operator_audit to ordo_system;
