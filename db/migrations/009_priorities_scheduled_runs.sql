-- Priorities and scheduled runs.
--
-- A run may carry a priority (0-9, higher first, 5 when not given) and a step may override it; the
-- effective priority of a step is copied into its ready queue item, where the claim takes a
-- tenant's ready items highest priority first, then oldest first (queue order: run age, then
-- topological order with ties by step id). Fairness between tenants does not look at it.
--
-- A run created with a notBefore in the future waits in the `scheduled` state (nothing queued)
-- until a graphile-worker job (ordo.engine.start_run, run_at = notBefore) starts it, or it is cancelled.
alter table run
  add column priority smallint not null default 5,
  add column not_before timestamptz,
  add constraint run_priority_range check (priority between 0 and 9);

alter table run drop constraint run_status_check;
alter table run add constraint run_status_check check (status = any (array[
  'scheduled', 'queued', 'running', 'succeeded', 'failed', 'cancelled']));

insert into state_transition (entity, from_state, to_state) values
  ('run', 'scheduled', 'queued'),
  ('run', 'scheduled', 'cancelled');

alter table queue_item
  add column priority smallint not null default 5;
alter table queue_item alter column priority set statistics 0;

-- The claim reads a tenant's ready items in (priority desc, id) order, ungated and under each gate.
drop index queue_item_ungated_ready_idx;
create index queue_item_ungated_ready_idx on queue_item (tenant_id, priority desc, id)
  where state = 'ready' and gate is null;
drop index queue_item_gated_ready_idx;
create index queue_item_gated_ready_idx on queue_item (tenant_id, gate, gate_limit, priority desc, id)
  where state = 'ready' and gate is not null;
