-- DAGs and their immutable versions.
-- A version's content never changes once inserted: the application roles may only insert it and
-- flip its status (column grants), a trigger refuses any other UPDATE even from the owner, and no
-- role is granted DELETE. Rollback is publishing again or re-enabling an older version.

create table dag (
  tenant_id text not null references tenant (id),
  dag_id text not null,
  -- Highest version number ever published (active or disabled); the next publish takes +1.
  latest_version integer not null,
  created_at timestamptz not null default now(),
  constraint dag_pk primary key (tenant_id, dag_id),
  constraint dag_latest_version_positive check (latest_version >= 0)
);
alter table dag enable row level security;
alter table dag force row level security;
create policy tenant_isolation on dag
  using (tenant_id = ordo_current_tenant()) with check (tenant_id = ordo_current_tenant());
grant select, insert, update (latest_version) on dag to ordo_app;
grant select, insert, update (latest_version) on dag to ordo_system;

create table dag_version (
  tenant_id text not null,
  dag_id text not null,
  version integer not null,
  -- SHA-256 hex of the RFC 8785 canonical JSON of `definition`.
  content_hash text not null,
  -- The normalized DagDefinition (durations in ms, defaults filled).
  definition jsonb not null,
  source_format text not null check (source_format in ('json', 'yaml')),
  status text not null default 'active' check (status in ('active', 'disabled')),
  -- Subject of the token that published the version.
  owner text not null,
  -- {kid, signer, alg, source: 'api' | 'bundle'} when the content was signed.
  signature jsonb,
  bundle_hash text,
  created_at timestamptz not null default now(),
  disabled_at timestamptz,
  constraint dag_version_pk primary key (tenant_id, dag_id, version),
  constraint dag_version_content_uq unique (tenant_id, dag_id, content_hash),
  constraint dag_version_dag_fk foreign key (tenant_id, dag_id) references dag (tenant_id, dag_id),
  constraint dag_version_positive check (version >= 1),
  constraint dag_version_hash_format check (content_hash ~ '^[0-9a-f]{64}$'),
  constraint dag_version_disabled_at check ((status = 'disabled') = (disabled_at is not null))
);
-- Listing order: dag_id ascending, version descending.
create index dag_version_list_idx on dag_version (tenant_id, dag_id, version desc);
alter table dag_version enable row level security;
alter table dag_version force row level security;
create policy tenant_isolation on dag_version
  using (tenant_id = ordo_current_tenant()) with check (tenant_id = ordo_current_tenant());
grant select, insert, update (status, disabled_at) on dag_version to ordo_app;
grant select, insert, update (status, disabled_at) on dag_version to ordo_system;

create function dag_version_immutable() returns trigger
  language plpgsql
  as $$
begin
  if (new.tenant_id, new.dag_id, new.version, new.content_hash, new.definition, new.source_format,
      new.owner, new.signature, new.bundle_hash, new.created_at)
     is distinct from
     (old.tenant_id, old.dag_id, old.version, old.content_hash, old.definition, old.source_format,
      old.owner, old.signature, old.bundle_hash, old.created_at) then
    raise exception 'dag_version %/% is immutable: only status and disabled_at may change', old.dag_id, old.version
      using errcode = 'integrity_constraint_violation';
  end if;
  return new;
end
$$;
create trigger dag_version_immutable before update on dag_version
  for each row execute function dag_version_immutable();

-- Who disabled or re-enabled a version, and when. Append-only: one row per actual status change.
create table dag_version_status_change (
  tenant_id text not null,
  dag_id text not null,
  version integer not null,
  changed_at timestamptz not null default clock_timestamp(),
  status text not null check (status in ('active', 'disabled')),
  actor text not null,
  constraint dag_version_status_change_pk primary key (tenant_id, dag_id, version, changed_at),
  constraint dag_version_status_change_version_fk foreign key (tenant_id, dag_id, version)
    references dag_version (tenant_id, dag_id, version)
);
alter table dag_version_status_change enable row level security;
alter table dag_version_status_change force row level security;
create policy tenant_isolation on dag_version_status_change
  using (tenant_id = ordo_current_tenant()) with check (tenant_id = ordo_current_tenant());
grant select, insert on dag_version_status_change to ordo_app;
grant select, insert on dag_version_status_change to ordo_system;
