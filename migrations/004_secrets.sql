-- Tenant secrets, referenced from step configs as ${{ secrets.NAME }}.
-- Values are stored only encrypted (AES-256-GCM). The key lives in a 0600 file beside the instance
-- signing keys, never in the database; key_id names the key that sealed each row, so keys can be
-- rotated. The GCM additional data binds a ciphertext to its tenant and name: a row copied to
-- another tenant or name does not decrypt.

create table secret (
  tenant_id text not null references tenant (id),
  name text not null,
  key_id text not null,
  nonce bytea not null,
  -- ciphertext followed by the 16-byte GCM tag
  ciphertext bytea not null,
  created_by text not null,
  updated_by text not null,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now(),
  constraint secret_pk primary key (tenant_id, name),
  constraint secret_name_format check (name ~ '^[A-Za-z_][A-Za-z0-9_-]{0,127}$'),
  constraint secret_nonce_size check (octet_length(nonce) = 12)
);
alter table secret enable row level security;
alter table secret force row level security;
create policy tenant_isolation on secret
  using (tenant_id = ordo_current_tenant()) with check (tenant_id = ordo_current_tenant());
grant select, insert, update, delete on secret to ordo_app;
grant select on secret to ordo_system;
