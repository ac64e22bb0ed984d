-- Signals: a signal step waits for a signal (name, correlation key) posted through the API. A signal
-- that arrives before a step waits for it is kept (pending) until one does; a delivered signal
-- names the run and step it went to (one signal, one step). Both tables are changed only under a
-- transaction advisory lock on (tenant, name, correlation key), taken by the API's insert and by the
-- engine's registration of a wait, so a signal and a wait for the same key never miss each other.

create table signal (
  tenant_id text not null references tenant(id),
  signal_id text not null,
  name text not null,
  correlation_key text not null,
  payload jsonb not null,
  sent_by text not null,
  received_at timestamptz not null,
  run_id uuid,
  step_id text,
  delivered_at timestamptz,
  constraint signal_pk primary key (tenant_id, signal_id),
  constraint signal_delivery_check check ((run_id is null) = (step_id is null) and (run_id is null) = (delivered_at is null))
);
-- Pending signals of a key, oldest first (the order a waiting step takes them in).
create index signal_pending_idx on signal (tenant_id, name, correlation_key, received_at, signal_id)
  where run_id is null;
alter table signal enable row level security;
alter table signal force row level security;
create policy tenant_isolation on signal using (tenant_id = ordo_current_tenant())
  with check (tenant_id = ordo_current_tenant());
grant select on table signal to ordo_app;
grant select, insert on table signal to ordo_system;
grant update (run_id, step_id, delivered_at) on table signal to ordo_system;

-- Signal steps that wait with no signal kept for them, in the order they registered (the order
-- signals are handed out in). A row whose step no longer waits at its epoch is stale and removed
-- when met.
create table signal_wait (
  tenant_id text not null references tenant(id),
  run_id uuid not null,
  step_id text not null,
  epoch integer not null,
  name text not null,
  correlation_key text not null,
  waiting_since timestamptz not null,
  constraint signal_wait_pk primary key (tenant_id, run_id, step_id, epoch)
);
create index signal_wait_key_idx on signal_wait (tenant_id, name, correlation_key, waiting_since, run_id, step_id);
alter table signal_wait enable row level security;
alter table signal_wait force row level security;
create policy tenant_isolation on signal_wait using (tenant_id = ordo_current_tenant())
  with check (tenant_id = ordo_current_tenant());
grant select, insert, delete on table signal_wait to ordo_system;
