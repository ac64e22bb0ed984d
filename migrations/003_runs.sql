-- Runs and their execution: run, step, attempt, run_event (append-only, hash-chained), the
-- per-tenant ready queue (queue_item + tenant_queue), artifacts (content-addressed outputs and
-- logs) and each tenant's webhook signing secret.
--
-- High-volume tables (attempt, run_event, artifact) carry a creation-time column in their primary
-- key and reference other tables by value only (no foreign keys), so they can be turned into
-- tables partitioned by range of that column and retired by dropping old partitions after an
-- export. The hot queue (queue_item) only holds work that is ready or leased: finished work leaves it.

-- Allowed state transitions. The same table exists in the code
-- (src/modules/runs/state-machine.ts, checked equal by a test); the triggers below refuse any
-- status change not listed here, whatever role writes it.
create table state_transition (
  entity text not null check (entity in ('run', 'step', 'attempt')),
  from_state text not null,
  to_state text not null,
  constraint state_transition_pk primary key (entity, from_state, to_state)
);
insert into state_transition (entity, from_state, to_state) values
  ('run', 'queued', 'running'),
  ('run', 'queued', 'succeeded'),
  ('run', 'queued', 'failed'),
  ('run', 'queued', 'cancelled'),
  ('run', 'running', 'succeeded'),
  ('run', 'running', 'failed'),
  ('run', 'running', 'cancelled'),
  ('step', 'pending', 'queued'),
  ('step', 'pending', 'skipped'),
  ('step', 'pending', 'cancelled'),
  ('step', 'queued', 'running'),
  ('step', 'queued', 'skipped'),
  ('step', 'queued', 'failed'),
  ('step', 'queued', 'cancelled'),
  ('step', 'running', 'succeeded'),
  ('step', 'running', 'failed'),
  ('step', 'running', 'retrying'),
  ('step', 'running', 'orphaned'),
  ('step', 'running', 'cancelled'),
  ('step', 'retrying', 'queued'),
  ('step', 'retrying', 'cancelled'),
  ('step', 'orphaned', 'queued'),
  ('step', 'orphaned', 'retrying'),
  ('step', 'orphaned', 'failed'),
  ('step', 'orphaned', 'cancelled'),
  ('attempt', 'running', 'succeeded'),
  ('attempt', 'running', 'failed'),
  ('attempt', 'running', 'orphaned'),
  ('attempt', 'running', 'cancelled');
grant select on state_transition to ordo_app, ordo_system;

create function ordo_check_transition() returns trigger
  language plpgsql
  as $$
begin
  if new.status is distinct from old.status and not exists (
    select 1 from state_transition t
    where t.entity = tg_argv[0] and t.from_state = old.status and t.to_state = new.status
  ) then
    raise exception 'illegal % transition % -> %', tg_argv[0], old.status, new.status
      using errcode = 'check_violation', hint = 'illegal_transition';
  end if;
  return new;
end
$$;

create table run (
  tenant_id text not null references tenant (id),
  run_id uuid not null,
  dag_id text not null,
  dag_version integer not null,
  content_hash text not null,
  run_token text not null,
  inputs jsonb not null,
  -- SHA-256 hex of the RFC 8785 canonical JSON of inputs.
  inputs_hash text not null,
  status text not null default 'queued'
    check (status in ('queued', 'running', 'succeeded', 'failed', 'cancelled')),
  -- Why the run ended the way it did (e.g. cancelled by whom, max_concurrent_runs).
  reason text,
  -- W3C trace id (32 hex), one per run across every attempt of every step.
  trace_id text not null check (trace_id ~ '^[0-9a-f]{32}$'),
  requested_by text not null,
  replay_of uuid,
  rerun_of uuid,
  rerun_from_step text,
  -- False while the run waits for a slot under its DAG's maxConcurrentRuns (action queue).
  admitted boolean not null default true,
  created_at timestamptz not null default now(),
  started_at timestamptz,
  finished_at timestamptz,
  steps_total integer not null,
  -- Steps not yet in a terminal state; the run ends when it reaches 0.
  steps_remaining integer not null,
  steps_failed integer not null default 0,
  -- Per-run counters: last dispatch sequence number given to a step, last event seq and hash.
  dispatch_count integer not null default 0,
  event_seq integer not null default 0,
  event_hash text not null default '',
  -- SHA-256 of the canonical JSON of {stepId: outputsHash} once the run ends.
  outputs_hash text,
  constraint run_pk primary key (tenant_id, run_id),
  -- Idempotency of POST /runs: one run per (tenant, dag, runToken); the service compares inputs_hash.
  constraint run_token_uq unique (tenant_id, dag_id, run_token),
  constraint run_inputs_hash_format check (inputs_hash ~ '^[0-9a-f]{64}$')
);
create index run_list_idx on run (tenant_id, created_at desc, run_id desc);
create index run_dag_list_idx on run (tenant_id, dag_id, created_at desc, run_id desc);
create index run_dag_active_idx on run (tenant_id, dag_id, created_at) where status in ('queued', 'running');
alter table run enable row level security;
alter table run force row level security;
create policy tenant_isolation on run
  using (tenant_id = ordo_current_tenant()) with check (tenant_id = ordo_current_tenant());
grant select, insert, update on run to ordo_app, ordo_system;
create trigger run_transition before update of status on run
  for each row execute function ordo_check_transition('run');

create table step (
  tenant_id text not null,
  run_id uuid not null,
  step_id text not null,
  status text not null
    check (status in ('pending', 'queued', 'running', 'succeeded', 'failed', 'skipped', 'cancelled', 'retrying', 'orphaned')),
  -- upstream_failed, disabled, cancelled, max_allowed_run_time, ... for terminal states other than succeeded.
  reason text,
  plugin text not null,
  -- The step's `with`, untemplated; templated right before each attempt.
  config jsonb not null,
  -- retry, timeout, egress, constraints of the step definition (normalized).
  spec jsonb not null,
  depends_on text[] not null,
  -- Position in the DAG's topological order (ties broken lexically by step id).
  topo_index integer not null,
  -- Dependencies not yet finished; the step is queued when it reaches 0.
  pending_deps integer not null,
  -- Order in which the run dispatched its steps (1, 2, ...).
  dispatch_seq integer,
  attempts integer not null default 0,
  -- Fencing epoch: incremented on every claim; a result carrying an older epoch is rejected.
  epoch integer not null default 0,
  -- Outputs inline when small (always also stored as an artifact under outputs_hash).
  outputs jsonb,
  outputs_hash text,
  logs_hash text,
  error jsonb,
  -- Succeeded in the run this one reruns; its outputs are reused, it is not executed.
  from_rerun boolean not null default false,
  queued_at timestamptz,
  started_at timestamptz,
  finished_at timestamptz,
  constraint step_pk primary key (tenant_id, run_id, step_id),
  constraint step_run_fk foreign key (tenant_id, run_id) references run (tenant_id, run_id)
);
alter table step enable row level security;
alter table step force row level security;
create policy tenant_isolation on step
  using (tenant_id = ordo_current_tenant()) with check (tenant_id = ordo_current_tenant());
grant select, insert, update on step to ordo_app, ordo_system;
create trigger step_transition before update of status on step
  for each row execute function ordo_check_transition('step');

-- One row per attempt of a step. Phase timings: queued (ready), claimed (lease taken),
-- constraint_checked (pre-execution constraints passed), started (plugin called), finished
-- (plugin returned), terminated (result applied or the attempt was orphaned/cancelled).
create table attempt (
  tenant_id text not null,
  run_id uuid not null,
  step_id text not null,
  attempt integer not null,
  created_at timestamptz not null default now(),
  epoch integer not null,
  worker_id text not null,
  status text not null default 'running' check (status in ('running', 'succeeded', 'failed', 'orphaned', 'cancelled')),
  lease_expires_at timestamptz not null,
  traceparent text not null,
  queued_at timestamptz,
  claimed_at timestamptz not null,
  constraint_checked_at timestamptz,
  started_at timestamptz,
  finished_at timestamptz,
  terminated_at timestamptz,
  error jsonb,
  outputs_hash text,
  logs_hash text,
  constraint attempt_pk primary key (tenant_id, run_id, step_id, attempt, created_at)
);
alter table attempt enable row level security;
alter table attempt force row level security;
create policy tenant_isolation on attempt
  using (tenant_id = ordo_current_tenant()) with check (tenant_id = ordo_current_tenant());
grant select on attempt to ordo_app;
grant select, insert, update on attempt to ordo_system;
create trigger attempt_transition before update of status on attempt
  for each row execute function ordo_check_transition('attempt');

-- Append-only event log, numbered per run without gaps (seq comes from run.event_seq under the
-- run's row lock) and hash-chained per run: hash = sha256(prev_hash || canonical JSON of the event).
create table run_event (
  tenant_id text not null,
  run_id uuid not null,
  seq integer not null,
  created_at timestamptz not null,
  type text not null,
  step_id text,
  attempt integer,
  actor text not null,
  data jsonb not null,
  prev_hash text not null,
  hash text not null check (hash ~ '^[0-9a-f]{64}$'),
  constraint run_event_pk primary key (tenant_id, run_id, seq, created_at),
  constraint run_event_seq_positive check (seq >= 1)
);
alter table run_event enable row level security;
alter table run_event force row level security;
create policy tenant_isolation on run_event
  using (tenant_id = ordo_current_tenant()) with check (tenant_id = ordo_current_tenant());
grant select, insert on run_event to ordo_app, ordo_system;

create function run_event_append_only() returns trigger
  language plpgsql
  as $$
begin
  raise exception 'run_event is append-only' using errcode = 'insufficient_privilege';
end
$$;
create trigger run_event_append_only before update or delete on run_event
  for each statement execute function run_event_append_only();

-- The per-tenant ready queue: one row per step that is ready (waiting for a worker) or leased
-- (a worker runs it; lease_expires_at is extended by heartbeats). Completion deletes the row.
create table queue_item (
  tenant_id text not null,
  id bigint generated always as identity,
  run_id uuid not null,
  step_id text not null,
  state text not null default 'ready' check (state in ('ready', 'leased')),
  worker_id text,
  epoch integer,
  lease_expires_at timestamptz,
  enqueued_at timestamptz not null default now(),
  constraint queue_item_pk primary key (tenant_id, id),
  -- A step is in the queue at most once.
  constraint queue_item_step_uq unique (tenant_id, run_id, step_id)
);
create index queue_item_ready_idx on queue_item (tenant_id, id) where state = 'ready';
-- The reaper scans expired leases across tenants (system work; the queue is small).
create index queue_item_lease_idx on queue_item (lease_expires_at) where state = 'leased';
alter table queue_item enable row level security;
alter table queue_item force row level security;
create policy tenant_isolation on queue_item
  using (tenant_id = ordo_current_tenant()) with check (tenant_id = ordo_current_tenant());
grant select, insert, update, delete on queue_item to ordo_app;
grant select, insert, update, delete on queue_item to ordo_system;

-- Per-tenant queue state for fair claiming: steps in flight (capped), weight, last service time.
create table tenant_queue (
  tenant_id text not null references tenant (id),
  in_flight integer not null default 0 check (in_flight >= 0),
  weight integer not null default 1 check (weight between 1 and 1000),
  served_at timestamptz not null default '-infinity',
  constraint tenant_queue_pk primary key (tenant_id)
);
alter table tenant_queue enable row level security;
alter table tenant_queue force row level security;
create policy tenant_isolation on tenant_queue
  using (tenant_id = ordo_current_tenant()) with check (tenant_id = ordo_current_tenant());
grant select, insert on tenant_queue to ordo_app;
grant select, insert, update on tenant_queue to ordo_system;

-- Content-addressed blobs (step outputs, logs), per tenant. Deduplicated per creation day, so the
-- key carries the day and the table can be partitioned by it.
create table artifact (
  tenant_id text not null,
  sha256 text not null check (sha256 ~ '^[0-9a-f]{64}$'),
  created_on date not null default current_date,
  media_type text not null,
  size integer not null,
  body_json jsonb,
  body_bytes bytea,
  created_at timestamptz not null default now(),
  constraint artifact_pk primary key (tenant_id, sha256, created_on),
  constraint artifact_one_body check ((body_json is null) <> (body_bytes is null))
);
alter table artifact enable row level security;
alter table artifact force row level security;
create policy tenant_isolation on artifact
  using (tenant_id = ordo_current_tenant()) with check (tenant_id = ordo_current_tenant());
grant select, insert on artifact to ordo_app, ordo_system;

-- Per-tenant secret signing outgoing constraint webhooks (HMAC-SHA256); created on first use.
create table tenant_webhook_secret (
  tenant_id text not null references tenant (id),
  secret text not null,
  created_at timestamptz not null default now(),
  constraint tenant_webhook_secret_pk primary key (tenant_id)
);
alter table tenant_webhook_secret enable row level security;
alter table tenant_webhook_secret force row level security;
create policy tenant_isolation on tenant_webhook_secret
  using (tenant_id = ordo_current_tenant()) with check (tenant_id = ordo_current_tenant());
grant select, insert on tenant_webhook_secret to ordo_system;
