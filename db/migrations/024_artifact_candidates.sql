-- Artifacts the runs deleted by retention named, waiting for the sweep that removes those no step
-- or attempt of their tenant names any more (ordo_retention_sweep_artifacts): the purge batches
-- only note them, so a tenant's steps and attempts are read once a pass, not once a batch.
create table artifact_candidate (
  tenant_id text not null references tenant (id),
  sha256 text not null,
  constraint artifact_candidate_pk primary key (tenant_id, sha256)
);
alter table artifact_candidate enable row level security;
alter table artifact_candidate force row level security;
create policy tenant_isolation on artifact_candidate using (tenant_id = ordo_current_tenant())
  with check (tenant_id = ordo_current_tenant());
grant select on table artifact_candidate to ordo_system;

alter table retention_log drop constraint retention_log_action_check;
alter table retention_log add constraint retention_log_action_check
  check (action in ('runs_deleted', 'partition_dropped', 'artifacts_deleted'));
