-- A tenant's dead-letter: the runs of DAGs with `onFailure: deadletter` that ended failed. The
-- engine enters a run when it ends it failed (ordo_engine_advance); an entry stays open until it
-- is requeued (a rerun from its failed step, requeued_run_id) or discarded, by whom and when.
create table dead_letter (
  tenant_id text not null references tenant (id),
  run_id uuid not null,
  dag_id text not null,
  dag_version integer not null,
  state text not null default 'open',
  created_at timestamptz not null default date_trunc('milliseconds', now()),
  resolved_at timestamptz,
  resolved_by text,
  requeued_run_id uuid,
  constraint dead_letter_pk primary key (tenant_id, run_id),
  constraint dead_letter_run_fk foreign key (tenant_id, run_id) references run (tenant_id, run_id),
  constraint dead_letter_state_check check (state in ('open', 'requeued', 'discarded')),
  constraint dead_letter_resolved_check check ((state = 'open') = (resolved_at is null))
);
create index dead_letter_list_idx on dead_letter (tenant_id, created_at, run_id);

alter table dead_letter enable row level security;
alter table dead_letter force row level security;
create policy tenant_isolation on dead_letter using (tenant_id = ordo_current_tenant())
  with check (tenant_id = ordo_current_tenant());
grant select on table dead_letter to ordo_app;
grant update (state, resolved_at, resolved_by, requeued_run_id) on table dead_letter to ordo_app;
grant select, insert on table dead_letter to ordo_system;
