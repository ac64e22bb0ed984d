-- Quotas at run creation (db/functions/ordo_create_runs.sql) count a tenant's open top-level runs
-- (maxConcurrentRuns): scheduled, queued or running, child runs of `dag` steps left out. This index
-- holds exactly those rows, so the count reads only the tenant's open runs.
create index run_open_top_idx on run (tenant_id)
  where status in ('scheduled', 'queued', 'running') and parent_run_id is null;

-- The operator audit log is read and written by the system role only, which bypasses row-level
-- security; like every table with a tenant_id column it has row-level security enabled and forced
-- with a tenant policy, so a tenant-bound role would see its own tenant's entries at most (the
-- application role has no grant on it).
alter table operator_audit enable row level security;
alter table operator_audit force row level security;
create policy tenant_isolation on operator_audit using (tenant_id = ordo_current_tenant())
  with check (tenant_id = ordo_current_tenant());
