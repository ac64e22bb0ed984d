-- The ledger is append-only: no UPDATE or DELETE of run_event, by any role, owner included.

create or replace function run_event_append_only() returns trigger
  language plpgsql
  as $$
begin
  raise exception 'run_event is append-only' using errcode = 'insufficient_privilege';
end
$$;

create or replace trigger run_event_append_only before update or delete on run_event
  for each statement execute function run_event_append_only();
