-- Whether retention keeps a run: the one home of which runs retention may remove. A run is kept
-- while it has not ended, or ended at or after p_cutoff, or (with p_requires_export) no export
-- that holds it started after it ended (run_export: an export reads a run as it is when it reaches
-- it, so only one started after the run ended holds its final state). An export holds a run when
-- the run's export instant (its start, else its creation, to the millisecond) is in the export's
-- range and the export named no other DAG.

create or replace function ordo_retention_keeps(p_run run, p_cutoff timestamptz, p_requires_export boolean)
  returns boolean
  language sql
  stable
  as $$
  select p_run.status not in ('succeeded', 'failed', 'cancelled')
    or p_run.finished_at is null
    or p_run.finished_at >= p_cutoff
    or (p_requires_export and not exists (
      select 1 from run_export x
      where x.tenant_id = p_run.tenant_id
        and x.started_at > p_run.finished_at
        and (x.range_from is null
          or date_trunc('milliseconds', coalesce(p_run.started_at, p_run.created_at)) >= x.range_from)
        and (x.range_to is null
          or date_trunc('milliseconds', coalesce(p_run.started_at, p_run.created_at)) < x.range_to)
        and (x.dag_id is null or x.dag_id = p_run.dag_id)))
$$;
