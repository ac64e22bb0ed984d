-- A revoked token's jti is announced on ordo_token_revoked, so every replica's token cache drops it at
-- once and open stream connections authenticated by it close, without waiting for a poll.

create or replace function api_token_revoked_notify() returns trigger
  language plpgsql
  as $$
begin
  if new.revoked_at is not null and old.revoked_at is null then
    perform pg_notify('ordo_token_revoked', new.tenant_id || ' ' || new.jti::text);
  end if;
  return null;
end
$$;

create or replace trigger api_token_revoked_notify after update of revoked_at on api_token
  for each row execute function api_token_revoked_notify();
