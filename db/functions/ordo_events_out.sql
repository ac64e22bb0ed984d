-- The appended events a statement reports to its caller: those that start or end runs and step
-- retries (the worker observes them for metrics and run spans), with their run's DAG, trace and start.

create or replace function ordo_events_out(p_ch ordo_adv_chained[], p_at timestamptz) returns setof jsonb
  language plpgsql stable
  set plan_cache_mode = force_generic_plan
  set enable_seqscan = off
  set enable_hashjoin = off
  set enable_mergejoin = off
  as $$
begin
  return query
    select jsonb_build_object('tenantId', e.tenant_id, 'runId', e.run_id, 'seq', e.seq,
      'createdAt', to_char(p_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
      'type', e.type, 'stepId', e.step_id, 'attempt', e.attempt, 'actor', e.actor, 'data', e.data::jsonb,
      'prevHash', e.prev_hash, 'hash', e.hash, 'dagId', x.dag_id, 'traceId', x.trace_id, 'startedAt', x.started_at)
    from unnest(p_ch) e join run x on x.tenant_id = e.tenant_id and x.run_id = e.run_id
    where e.type like 'run.%' or e.type = 'step.retrying'
    order by e.tenant_id, e.run_id, e.seq;
end
$$;

alter function ordo_events_out(ordo_adv_chained[], timestamptz) set jit = off;

revoke all on function ordo_events_out(p_ch ordo_adv_chained[], p_at timestamp with time zone) from public;
grant all on function ordo_events_out(p_ch ordo_adv_chained[], p_at timestamp with time zone) to ordo_system;
