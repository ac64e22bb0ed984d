-- A retrying step's backoff elapsed (the retry job, db/functions/ordo_engine_advance.sql): the step,
-- still retrying after attempt `p_attempt` in a run still under way, is queued again (step.queued,
-- under its gate when it has one) and its tenant's workers woken. Anything else (the run was
-- cancelled, the step moved on) leaves everything as it is. Returns whether it queued the step.

create or replace function ordo_engine_requeue(p_tenant text, p_run uuid, p_step text, p_attempt integer) returns boolean
  language plpgsql
  set jit = off
  as $$
declare
  v_now timestamptz := date_trunc('milliseconds', now());
  v_ch ordo_adv_chained[];
begin
  perform 1 from run x where x.tenant_id = p_tenant and x.run_id = p_run and x.status in ('queued', 'running')
  for update of x;
  if not found then
    return false;
  end if;
  update step s set status = 'queued', queued_at = now()
  where s.tenant_id = p_tenant and s.run_id = p_run and s.step_id = p_step and s.status = 'retrying'
    and s.attempts = p_attempt;
  if not found then
    return false;
  end if;
  insert into queue_item (tenant_id, run_id, step_id, gate, gate_limit, priority)
  select s.tenant_id, s.run_id, s.step_id,
    ordo_step_gate(r.dag_id, s.step_id, s.spec), (s.spec->>'concurrency')::integer,
    coalesce((s.spec->>'priority')::smallint, 5)
  from step s join run r on r.tenant_id = s.tenant_id and r.run_id = s.run_id
  where s.tenant_id = p_tenant and s.run_id = p_run and s.step_id = p_step;
  perform ordo_notify('ordo_ready', p_tenant);
  v_ch := ordo_append_events(array[
    row(p_tenant, p_run, 1, 'step.queued', p_step, p_attempt + 1, 'engine', '{"retry":' || p_attempt || '}')::ordo_adv_event
  ], v_now);
  update run x set event_seq = e.seq, event_hash = e.hash
  from ordo_event_heads(v_ch) e where x.tenant_id = e.tenant_id and x.run_id = e.run_id;
  return true;
end
$$;

revoke all on function ordo_engine_requeue(text, uuid, text, integer) from public;
grant all on function ordo_engine_requeue(text, uuid, text, integer) to ordo_system;
