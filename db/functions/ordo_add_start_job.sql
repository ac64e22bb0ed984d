-- Adds the start job of a scheduled run (ordo.engine.start_run, src/modules/engine/jobs.ts) at its
-- notBefore, for run creation (db/functions/ordo_create_runs.sql) in the application role's
-- transaction: graphile-worker's tables admit no row from a role under row-level security, so this
-- runs as their owner. The job is for the run of the tenant the transaction is bound to (its key:
-- one per run), and does nothing unless that run is still scheduled when it runs.

create or replace function ordo_add_start_job(p_run uuid, p_at timestamptz) returns void
  language plpgsql
  security definer
  set search_path = pg_catalog, public
  as $$
declare
  v_t text := ordo_current_tenant();
begin
  if v_t is null then
    raise exception 'ordo_add_start_job: the transaction is bound to no tenant' using errcode = 'insufficient_privilege';
  end if;
  perform graphile_worker.add_job('ordo.engine.start_run', json_build_object('tenantId', v_t, 'runId', p_run),
    run_at => p_at, job_key => 'start:' || v_t || ':' || p_run, max_attempts => 25);
end
$$;

revoke all on function ordo_add_start_job(uuid, timestamptz) from public;
grant all on function ordo_add_start_job(uuid, timestamptz) to ordo_app;
