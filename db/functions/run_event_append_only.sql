-- The ledger is append-only: no UPDATE or DELETE of run_event, by any role, owner included. The
-- one exception is retention's removal of whole runs (ordo_retention_purge, owned by the owner),
-- which sets ordo.retention_purge for its own transaction around its DELETE; the application and
-- system roles have no DELETE grant on run_event to begin with. Dropping a month partition
-- (ordo_retention_drop_month) removes no row through the table, so no trigger fires.

create or replace function run_event_append_only() returns trigger
  language plpgsql
  as $$
begin
  if tg_op = 'DELETE' and current_setting('ordo.retention_purge', true) = 'on' then
    return null;
  end if;
  raise exception 'run_event is append-only' using errcode = 'insufficient_privilege';
end
$$;

create or replace trigger run_event_append_only before update or delete on run_event
  for each statement execute function run_event_append_only();
