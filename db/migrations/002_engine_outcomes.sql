-- The engine applies every kind of result in the database (db/functions/ordo_engine_advance.sql):
-- a result carries the status it was reported with, the outcome the engine makes of it (applied,
-- retried, failed, rejected as fenced out…), its error and who reported it; the function passes step
-- keys between its statements as arrays of ordo_step_key.
alter type ordo_adv_result
  add attribute status text,
  add attribute outcome text,
  add attribute error jsonb,
  add attribute actor text;

create type ordo_step_key as (tenant_id text, run_id uuid, step_id text);
