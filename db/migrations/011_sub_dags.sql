-- Sub-DAG runs. A run started by a `dag` step of another run of the tenant names that run and step
-- (its parent) and its depth (a top-level run is 0, its children 1, …); the parent's cancel reaches
-- its children through the index.
alter table run add column parent_run_id uuid;
alter table run add column parent_step_id text;
alter table run add column depth smallint not null default 0;
alter table run add constraint run_parent_check check ((parent_run_id is null) = (parent_step_id is null));
create index run_parent_idx on run (tenant_id, parent_run_id) where parent_run_id is not null;
