-- External workers (the pull model): tenants run their own workers, which authenticate with
-- `worker` tokens bound to a pool, register what they can do, pull the tasks of `queue` steps and
-- post results. A queue step waits (holding no slot and no lease) while its task is with them.

-- A worker token is a tenant token with the one scope `worker`, bound to a pool; last_seen_at is
-- when a worker holding it was last heard from.
alter table api_token add column pool text;
alter table api_token add column last_seen_at timestamptz;
alter table api_token add constraint api_token_pool_check
  check ((pool is not null) = (scopes = array['worker']::text[]));
grant update (last_seen_at) on table api_token to ordo_system;

-- A pool's dispatch settings (a pool with no row uses the defaults) and its round-robin cursor.
create table worker_pool (
  tenant_id text not null references tenant (id),
  pool text not null,
  strategy text not null default 'default',
  rr_last uuid,
  updated_at timestamptz not null default date_trunc('milliseconds', now()),
  updated_by text,
  constraint worker_pool_pk primary key (tenant_id, pool),
  constraint worker_pool_strategy_check
    check (strategy in ('default', 'round_robin', 'least_connections', 'cheapest', 'best_value'))
);

-- A registered worker instance. It is online while heard from within ttl_ms (heartbeats, pulls,
-- an open channel); draining takes no new task; offline is final (a worker that comes back
-- registers again, as a new instance).
create table worker (
  tenant_id text not null references tenant (id),
  worker_id uuid not null,
  pool text not null,
  name text not null,
  token_jti uuid not null,
  task_types jsonb not null,
  cpu numeric,
  memory_bytes bigint,
  gpu_count integer not null default 0,
  gpu_model text,
  vram_bytes bigint not null default 0,
  models text[] not null default '{}',
  loaded text[] not null default '{}',
  labels jsonb not null default '{}',
  max_concurrent integer not null,
  cost_per_second numeric not null default 0,
  sdk_version text,
  status text not null default 'online',
  ttl_ms integer not null,
  registered_at timestamptz not null default date_trunc('milliseconds', now()),
  last_seen_at timestamptz not null default date_trunc('milliseconds', now()),
  offline_at timestamptz,
  last_task_type text,
  constraint worker_pk primary key (tenant_id, worker_id),
  constraint worker_status_check check (status in ('online', 'draining', 'offline')),
  constraint worker_capacity_check check (max_concurrent between 1 and 10000 and cost_per_second >= 0)
);
create index worker_pool_idx on worker (tenant_id, pool, worker_id) where status <> 'offline';
create index worker_live_idx on worker (last_seen_at) where status <> 'offline';
create index worker_list_idx on worker (tenant_id, registered_at desc, worker_id);

-- A worker name's record in its pool (it outlives instances): outcomes with time decay
-- (successes; failures weighted: a contract violation counts more, a lost task or timeout counts),
-- the score they give, and blocked_at once the score fell below the floor (no dispatch until an
-- operator resets it, recorded with who and why).
create table worker_reputation (
  tenant_id text not null references tenant (id),
  pool text not null,
  name text not null,
  successes double precision not null default 0,
  failures double precision not null default 0,
  violations integer not null default 0,
  timeouts integer not null default 0,
  tasks integer not null default 0,
  score double precision not null default 0.5,
  updated_at timestamptz not null default now(),
  blocked_at timestamptz,
  reset_at timestamptz,
  reset_by text,
  reset_reason text,
  constraint worker_reputation_pk primary key (tenant_id, pool, name)
);

-- The task of a queue step's attempt: pending until a worker is chosen, assigned to it, delivered when it pulls it, then succeeded or failed by its result,
-- cancelled when its step stops waiting (run cancelled, timeout), or orphaned when its worker is
-- lost. Inputs are kept only while the task is open (sealed when they carry secrets).
create table worker_task (
  tenant_id text not null references tenant (id),
  task_id uuid not null,
  run_id uuid not null,
  step_id text not null,
  attempt integer not null,
  epoch integer not null,
  dag_id text not null,
  dag_version integer not null,
  pool text not null,
  task_type text not null,
  requires jsonb not null default '{}',
  strategy text,
  priority smallint not null default 5,
  inputs jsonb,
  inputs_sealed jsonb,
  traceparent text not null,
  deadline timestamptz not null,
  dispatch_deadline timestamptz,
  status text not null default 'pending',
  worker_id uuid,
  created_at timestamptz not null default date_trunc('milliseconds', now()),
  assigned_at timestamptz,
  delivered_at timestamptz,
  finished_at timestamptz,
  end_reason text,
  result_digest text,
  progress jsonb,
  late_results integer not null default 0,
  constraint worker_task_pk primary key (tenant_id, task_id),
  constraint worker_task_attempt_key unique (tenant_id, run_id, step_id, attempt),
  constraint worker_task_run_fk foreign key (tenant_id, run_id) references run (tenant_id, run_id),
  constraint worker_task_status_check
    check (status in ('pending', 'assigned', 'delivered', 'succeeded', 'failed', 'cancelled', 'orphaned')),
  constraint worker_task_worker_check check (
    (status = 'pending' and worker_id is null)
    or (status in ('assigned', 'delivered', 'succeeded', 'orphaned') and worker_id is not null)
    or status in ('cancelled', 'failed'))
);
-- Pending tasks of a pool in dispatch order; a worker's held tasks; open tasks by deadline.
create index worker_task_pending_idx on worker_task (tenant_id, pool, priority desc, created_at, task_id)
  where status = 'pending';
create index worker_task_held_idx on worker_task (tenant_id, worker_id, assigned_at, task_id)
  where status in ('assigned', 'delivered');
create index worker_task_open_idx on worker_task (deadline) where status in ('pending', 'assigned', 'delivered');
create index worker_task_step_idx on worker_task (tenant_id, run_id, step_id, attempt);

-- Row-level security: the tenant, and, for a worker's own transactions (app.worker_pool set), its pool.
alter table worker_pool enable row level security;
alter table worker_pool force row level security;
create policy tenant_isolation on worker_pool using (tenant_id = ordo_current_tenant())
  with check (tenant_id = ordo_current_tenant());
alter table worker enable row level security;
alter table worker force row level security;
create policy tenant_isolation on worker using (tenant_id = ordo_current_tenant())
  with check (tenant_id = ordo_current_tenant());
create policy pool_isolation on worker as restrictive
  using (coalesce(current_setting('app.worker_pool', true), '') in ('', pool));
alter table worker_reputation enable row level security;
alter table worker_reputation force row level security;
create policy tenant_isolation on worker_reputation using (tenant_id = ordo_current_tenant())
  with check (tenant_id = ordo_current_tenant());
alter table worker_task enable row level security;
alter table worker_task force row level security;
create policy tenant_isolation on worker_task using (tenant_id = ordo_current_tenant())
  with check (tenant_id = ordo_current_tenant());
create policy pool_isolation on worker_task as restrictive
  using (coalesce(current_setting('app.worker_pool', true), '') in ('', pool));

grant select, insert, update on table worker_pool to ordo_app;
grant select, insert, update on table worker_pool to ordo_system;
grant select, insert on table worker to ordo_app;
grant update (status, offline_at) on table worker to ordo_app;
grant select, insert, update on table worker to ordo_system;
grant select on table worker_reputation to ordo_app;
grant select, insert, update on table worker_reputation to ordo_system;
grant select on table worker_task to ordo_app;
-- A worker's pull (its own tenant's and pool's transaction) marks the tasks it takes delivered.
grant update (status, delivered_at) on table worker_task to ordo_app;
grant select, insert, update on table worker_task to ordo_system;
