-- A gated step left running: the next item under its gate may be claimed now (wakes the tenant's workers).

create or replace function ordo_gate_freed() returns trigger
  language plpgsql
  as $$
begin
  perform ordo_notify('ordo_ready', old.tenant_id);
  return null;
end
$$;

create or replace trigger queue_item_gate_freed after delete on queue_item
  for each row when (old.gate is not null and old.state = 'leased') execute function ordo_gate_freed();
