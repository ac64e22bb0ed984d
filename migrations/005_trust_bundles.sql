-- Trust store, signed offline bundles and the files they ship.
-- A bundle and its files never change once imported: no UPDATE or DELETE is granted on them.
-- A trusted key is never deleted either; revoking it sets revoked_at (kept for the audit trail).

-- Ed25519 public keys a tenant trusts to sign bundles and DAG versions.
create table trust_key (
  tenant_id text not null references tenant (id),
  kid text not null,
  -- The signer this key speaks for; a bundle's manifest owner must equal it.
  owner text not null,
  -- The public JWK (kty OKP, crv Ed25519, x); never a private part.
  public_jwk jsonb not null,
  created_by text not null,
  created_at timestamptz not null default now(),
  expires_at timestamptz,
  revoked_at timestamptz,
  revoked_by text,
  constraint trust_key_pk primary key (tenant_id, kid),
  constraint trust_key_kid_format check (kid ~ '^[A-Za-z0-9._:-]{1,128}$'),
  constraint trust_key_public_only check (not (public_jwk ? 'd')),
  constraint trust_key_revoked check ((revoked_at is null) = (revoked_by is null))
);
create index trust_key_tenant_created_idx on trust_key (tenant_id, created_at desc, kid);
alter table trust_key enable row level security;
alter table trust_key force row level security;
create policy tenant_isolation on trust_key
  using (tenant_id = ordo_current_tenant()) with check (tenant_id = ordo_current_tenant());
grant select, insert, update (revoked_at, revoked_by) on trust_key to ordo_app;
grant select on trust_key to ordo_system;

-- One imported bundle, identified by the SHA-256 of its manifest bytes.
create table bundle (
  tenant_id text not null references tenant (id),
  bundle_hash text not null,
  name text not null,
  version text not null,
  owner text not null,
  -- The manifest as imported (parsed from manifest.json) and its detached JWS.
  manifest jsonb not null,
  signature text not null,
  kid text not null,
  -- The DAG versions the import published or found already published: [{dagId, version, path}].
  dags jsonb not null,
  imported_by text not null,
  imported_at timestamptz not null default now(),
  constraint bundle_pk primary key (tenant_id, bundle_hash),
  constraint bundle_name_version_uq unique (tenant_id, name, version),
  constraint bundle_hash_format check (bundle_hash ~ '^[0-9a-f]{64}$'),
  constraint bundle_kid_fk foreign key (tenant_id, kid) references trust_key (tenant_id, kid)
);
create index bundle_tenant_imported_idx on bundle (tenant_id, imported_at desc, bundle_hash);
alter table bundle enable row level security;
alter table bundle force row level security;
create policy tenant_isolation on bundle
  using (tenant_id = ordo_current_tenant()) with check (tenant_id = ordo_current_tenant());
grant select, insert on bundle to ordo_app;
grant select on bundle to ordo_system;

-- File contents, addressed by their SHA-256; shared by every bundle of the tenant that ships them.
create table bundle_blob (
  tenant_id text not null references tenant (id),
  sha256 text not null,
  size integer not null,
  content bytea not null,
  constraint bundle_blob_pk primary key (tenant_id, sha256),
  constraint bundle_blob_hash_format check (sha256 ~ '^[0-9a-f]{64}$'),
  constraint bundle_blob_size check (size = octet_length(content))
);
alter table bundle_blob enable row level security;
alter table bundle_blob force row level security;
create policy tenant_isolation on bundle_blob
  using (tenant_id = ordo_current_tenant()) with check (tenant_id = ordo_current_tenant());
grant select, insert on bundle_blob to ordo_app;
grant select on bundle_blob to ordo_system;

-- Every file a bundle ships, by its path inside the bundle.
create table bundle_file (
  tenant_id text not null,
  bundle_hash text not null,
  path text not null,
  kind text not null check (kind in ('dag', 'script', 'file')),
  sha256 text not null,
  size integer not null,
  constraint bundle_file_pk primary key (tenant_id, bundle_hash, path),
  constraint bundle_file_bundle_fk foreign key (tenant_id, bundle_hash) references bundle (tenant_id, bundle_hash),
  constraint bundle_file_blob_fk foreign key (tenant_id, sha256) references bundle_blob (tenant_id, sha256)
);
alter table bundle_file enable row level security;
alter table bundle_file force row level security;
create policy tenant_isolation on bundle_file
  using (tenant_id = ordo_current_tenant()) with check (tenant_id = ordo_current_tenant());
grant select, insert on bundle_file to ordo_app;
grant select on bundle_file to ordo_system;

-- Tenant admins change their own tenant's settings (e.g. requireSignedDags); RLS limits the row.
grant update (settings) on tenant to ordo_app;
