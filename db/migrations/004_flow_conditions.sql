-- Conditions and trigger rules. A step remembers how many of its dependencies ended failed (failed,
-- or skipped because something upstream failed) and how many were skipped otherwise; with
-- pending_deps and the number of its dependencies, that is what its trigger rule decides on
-- (db/functions/ordo_trigger_decision.sql). A step whose condition is false ends skipped from
-- running, and its attempt ends skipped.
alter table step
  add column deps_failed smallint not null default 0,
  add column deps_skipped smallint not null default 0;
alter table step alter column deps_failed set statistics 0;
alter table step alter column deps_skipped set statistics 0;

alter table attempt drop constraint attempt_status_check;
alter table attempt add constraint attempt_status_check
  check (status = any (array['running', 'succeeded', 'failed', 'orphaned', 'cancelled', 'skipped']));

insert into state_transition (entity, from_state, to_state) values
  ('attempt', 'running', 'skipped'),
  ('step', 'running', 'skipped');

-- A step skipped by ordo_engine_advance, with why.
create type ordo_adv_skip as (tenant_id text, run_id uuid, step_id text, reason text);
