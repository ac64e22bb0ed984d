-- A queue step's timeout bounds its work on a worker, not its wait for one: its task keeps the
-- timeout (timeout_ms) and gets its deadline when a worker is assigned it; a task handed back to
-- the pool has none until its next assignment. The wait is bounded by dispatch_deadline alone (the
-- step's dispatchTimeout). Tasks opened before keep the deadline they were given.
alter table worker_task add column timeout_ms integer;
alter table worker_task alter column deadline drop not null;
