-- Console sign-in sessions. A person exchanges a token once for a random session id, held by the
-- browser in an HttpOnly cookie; only the id's SHA-256 is stored, so a read of this table opens no
-- session. The token itself is never stored: a session keeps the token's jti, subject and scopes,
-- and every request through it checks the token's revocation and its tenant's status as a bearer
-- request does. A session ends when it is signed out (its row deleted), at expires_at (never
-- later than the token's expiry, nor 12 hours after sign-in), or when its token is revoked.
create table console_session (
  id_hash bytea not null,
  -- null for a platform operator's session (a platform token belongs to no tenant).
  tenant_id text references tenant (id),
  token_jti uuid not null,
  subject text not null,
  scopes text[] not null,
  created_at timestamptz not null default now(),
  expires_at timestamptz not null,
  constraint console_session_pk primary key (id_hash),
  constraint console_session_id_hash_check check (octet_length(id_hash) = 32),
  constraint console_session_expiry_check check (expires_at > created_at)
);
-- Expired rows are removed in small batches at sign-in.
create index console_session_expires_idx on console_session (expires_at);

alter table console_session enable row level security;
alter table console_session force row level security;
create policy tenant_isolation on console_session using (tenant_id = ordo_current_tenant())
  with check (tenant_id = ordo_current_tenant());

-- A session is found by its id before its tenant is known, as a token's status is: by the system role.
grant select, insert, delete on table console_session to ordo_system;
