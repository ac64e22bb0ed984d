-- A tenant's status change (disabled, enabled again) reaches every api replica at once, like a token
-- revocation: replicas that keep the status of presented tokens drop what they know of the tenant.

create or replace function tenant_status_notify() returns trigger
  language plpgsql
  as $$
begin
  perform pg_notify('ordo_tenant_status', new.id);
  return null;
end
$$;

create or replace trigger tenant_status_notify after update of status on tenant
  for each row when (old.status is distinct from new.status) execute function tenant_status_notify();
