-- Cron schedules and the record of each fire time.
-- A schedule's due work is claimed by one scheduler process at a time (row lock, SKIP LOCKED);
-- schedule_fire's key (tenant_id, schedule_id, fire_time) records each fire time at most once,
-- and the run it created carries the deterministic token schedule:<id>:<fireTimeUtc>.

create table schedule (
  tenant_id text not null references tenant (id),
  id uuid not null,
  dag_id text not null,
  -- Null: the DAG's latest active version when the fire happens.
  dag_version integer,
  cron text not null,
  timezone text not null,
  inputs jsonb not null default '{}'::jsonb,
  catch_up text not null check (catch_up in ('none', 'latest', 'all')),
  overlap text not null check (overlap in ('allow', 'skip', 'queue', 'cancel-previous')),
  paused boolean not null default false,
  -- The earliest fire time not yet handled; null when the expression has no further fire time.
  next_fire_at timestamptz,
  -- overlap = queue: the fire time waiting for the previous run to end.
  queued_fire_at timestamptz,
  -- The run created by the most recent fire (overlap checks look at it).
  last_run_id uuid,
  last_fire_at timestamptz,
  created_by text not null,
  -- Millisecond precision: the listing's page token carries it exactly.
  created_at timestamptz not null default date_trunc('milliseconds', now()),
  updated_at timestamptz not null default now(),
  constraint schedule_pk primary key (tenant_id, id),
  constraint schedule_dag_fk foreign key (tenant_id, dag_id) references dag (tenant_id, dag_id),
  constraint schedule_version_positive check (dag_version is null or dag_version >= 1)
);
-- Listing order: created_at, id (keyset).
create index schedule_list_idx on schedule (tenant_id, created_at, id);
-- The scheduler's cross-tenant scan for due work.
create index schedule_due_idx on schedule (next_fire_at) where not paused;
create index schedule_queued_idx on schedule (queued_fire_at) where queued_fire_at is not null and not paused;
alter table schedule enable row level security;
alter table schedule force row level security;
create policy tenant_isolation on schedule
  using (tenant_id = ordo_current_tenant()) with check (tenant_id = ordo_current_tenant());
grant select, insert, update, delete on schedule to ordo_app;
grant select, update on schedule to ordo_system;

-- One row per handled fire time. outcome: created (run_id set; an already used run token yields
-- the same run), skipped (overlap = skip, or a later fire while one is queued), queued
-- (waiting for the previous run), cancelled-previous (the previous run was cancelled, run_id is
-- the new run), failed (the run could not be created: error says why).
create table schedule_fire (
  tenant_id text not null,
  schedule_id uuid not null,
  fire_time timestamptz not null,
  run_id uuid,
  outcome text not null check (outcome in ('created', 'skipped', 'queued', 'cancelled-previous', 'failed')),
  error text,
  fired_at timestamptz not null default now(),
  constraint schedule_fire_pk primary key (tenant_id, schedule_id, fire_time),
  constraint schedule_fire_schedule_fk foreign key (tenant_id, schedule_id)
    references schedule (tenant_id, id) on delete cascade
);
alter table schedule_fire enable row level security;
alter table schedule_fire force row level security;
create policy tenant_isolation on schedule_fire
  using (tenant_id = ordo_current_tenant()) with check (tenant_id = ordo_current_tenant());
grant select on schedule_fire to ordo_app;
grant select, insert, update (run_id, outcome, error) on schedule_fire to ordo_system;

-- Changes made through the API wake every scheduler process (payload: tenant id). The scheduler's
-- own bookkeeping (next_fire_at, queued_fire_at, last_*) does not notify.
create function schedule_notify() returns trigger
  language plpgsql
  as $$
begin
  perform pg_notify('ordo_schedule_changed', coalesce(new.tenant_id, old.tenant_id));
  return null;
end
$$;
create trigger schedule_notify
  after insert or delete or update of dag_id, dag_version, cron, timezone, inputs, catch_up, overlap, paused
  on schedule for each row execute function schedule_notify();
