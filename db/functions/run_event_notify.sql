-- New events announced per tenant on ordo_run_event with the highest stream id inserted: the live
-- stream reads what follows its cursor, on every replica.

create or replace function run_event_notify() returns trigger
  language plpgsql
  as $$
begin
  perform ordo_notify('ordo_run_event', i.tenant_id || ' ' || i.max_id)
  from (select tenant_id, max(stream_id) as max_id from inserted group by tenant_id) i;
  return null;
end
$$;

create or replace trigger run_event_notify after insert on run_event
  referencing new table as inserted
  for each statement execute function run_event_notify();
