-- Foundation: tenants, API tokens, idempotency records.
-- Every tenant-owned table: tenant_id leads each key, RLS enabled and forced, keyed on the
-- transaction-local setting app.tenant_id. ordo_app (requests) is bound by RLS; ordo_system
-- (scheduler, reaper, queue claims) bypasses it. Neither owns a table.

create function ordo_current_tenant() returns text
  language sql stable parallel safe
  as $$ select nullif(current_setting('app.tenant_id', true), '') $$;

create table tenant (
  id text not null,
  name text not null,
  status text not null default 'active' check (status in ('active', 'disabled')),
  settings jsonb not null default '{}'::jsonb,
  created_at timestamptz not null default now(),
  disabled_at timestamptz,
  constraint tenant_pk primary key (id),
  constraint tenant_id_format check (id ~ '^[a-z0-9][a-z0-9-]{0,62}$')
);
alter table tenant enable row level security;
alter table tenant force row level security;
create policy tenant_isolation on tenant
  using (id = ordo_current_tenant()) with check (id = ordo_current_tenant());
grant select on tenant to ordo_app;
grant select, insert, update on tenant to ordo_system;

-- Tokens minted for a tenant. The JWT itself is never stored; jti identifies it for revocation.
create table api_token (
  tenant_id text not null references tenant (id),
  jti uuid not null,
  subject text not null,
  scopes text[] not null,
  description text,
  created_by text not null,
  created_at timestamptz not null default now(),
  expires_at timestamptz not null,
  revoked_at timestamptz,
  revoked_by text,
  constraint api_token_pk primary key (tenant_id, jti)
);
create index api_token_tenant_created_idx on api_token (tenant_id, created_at desc, jti);
alter table api_token enable row level security;
alter table api_token force row level security;
create policy tenant_isolation on api_token
  using (tenant_id = ordo_current_tenant()) with check (tenant_id = ordo_current_tenant());
grant select, insert, update on api_token to ordo_app;
grant select, insert, update on api_token to ordo_system;

-- Platform operator tokens (scope platform:admin) belong to no tenant.
create table platform_token (
  jti uuid not null,
  subject text not null,
  description text,
  created_at timestamptz not null default now(),
  expires_at timestamptz not null,
  revoked_at timestamptz,
  constraint platform_token_pk primary key (jti)
);
grant select, insert, update on platform_token to ordo_system;

-- Idempotency-Key records (IETF draft semantics), per tenant.
create table idempotency_key (
  tenant_id text not null references tenant (id),
  key text not null,
  method text not null,
  path text not null,
  request_hash text not null,
  state text not null check (state in ('processing', 'done')),
  response_status integer,
  response_body jsonb,
  created_at timestamptz not null default now(),
  expires_at timestamptz not null,
  constraint idempotency_key_pk primary key (tenant_id, key)
);
create index idempotency_key_expiry_idx on idempotency_key (expires_at);
alter table idempotency_key enable row level security;
alter table idempotency_key force row level security;
create policy tenant_isolation on idempotency_key
  using (tenant_id = ordo_current_tenant()) with check (tenant_id = ordo_current_tenant());
grant select, insert, update, delete on idempotency_key to ordo_app;
grant select, delete on idempotency_key to ordo_system;

grant execute on function ordo_current_tenant() to ordo_app, ordo_system;
