-- A check of a waiting step's preconditions (the ordo.engine.precondition_check job), in one
-- statement and one commit. The step must still wait at `epoch` in a run still under way (else
-- false, and nothing is written). Its result is appended to the run (`step.precondition_checked`,
-- `data` in canonical JSON); then, when the preconditions hold, the step is queued again (under its
-- gate when it has one, at its priority; step.queued) with its attempt still open, which the next claim resumes
-- (db/functions/ordo_engine_claim.sql); otherwise the next check is a job `next_ms` from now. (A
-- check past the step's maxWait is not recorded here: its failure goes through ordo_engine_resolve.)

create or replace function ordo_engine_precondition(p jsonb) returns boolean
  language plpgsql
  set jit = off
  as $$
declare
  v_now timestamptz := date_trunc('milliseconds', now());
  v_t text := p->>'tenantId';
  v_run uuid := (p->>'runId')::uuid;
  v_s text := p->>'stepId';
  v_epoch integer := (p->>'epoch')::integer;
  v_holds boolean := (p->>'holds')::boolean;
  v_attempt integer;
  v_ch ordo_adv_chained[];
begin
  perform 1 from run x where x.tenant_id = v_t and x.run_id = v_run and x.status in ('queued', 'running')
  for update of x;
  if not found then
    return false;
  end if;
  select s.attempts into v_attempt from step s
  where s.tenant_id = v_t and s.run_id = v_run and s.step_id = v_s and s.status = 'waiting' and s.epoch = v_epoch;
  if not found then
    return false;
  end if;

  if v_holds then
    -- (The reason marks the step for the claim that resumes its open attempt.)
    update step s set status = 'queued', reason = 'precondition_held', queued_at = now()
    where s.tenant_id = v_t and s.run_id = v_run and s.step_id = v_s;
    insert into queue_item (tenant_id, run_id, step_id, gate, gate_limit, priority)
    select s.tenant_id, s.run_id, s.step_id,
      ordo_step_gate(r.dag_id, s.step_id, s.spec), (s.spec->>'concurrency')::integer,
      coalesce((s.spec->>'priority')::smallint, 5)
    from step s join run r on r.tenant_id = s.tenant_id and r.run_id = s.run_id
    where s.tenant_id = v_t and s.run_id = v_run and s.step_id = v_s;
    perform ordo_notify('ordo_ready', v_t);
  else
    perform graphile_worker.add_job('ordo.engine.precondition_check',
      json_build_object('tenantId', v_t, 'runId', v_run, 'stepId', v_s, 'epoch', v_epoch,
        'check', (p->>'check')::integer + 1),
      run_at => now() + make_interval(secs => (p->>'nextMs')::numeric / 1000),
      job_key => 'precondition:' || v_t || ':' || v_run || ':' || v_s || ':' || v_epoch || ':' || ((p->>'check')::integer + 1),
      max_attempts => 25);
  end if;

  v_ch := ordo_append_events(array[
    row(v_t, v_run, 1, 'step.precondition_checked', v_s, v_attempt, 'engine', p->>'data')::ordo_adv_event
  ] || case when v_holds then array[
    row(v_t, v_run, 2, 'step.queued', v_s, v_attempt, 'engine', '{"precondition":true}')::ordo_adv_event
  ] else '{}'::ordo_adv_event[] end, v_now);
  update run x set event_seq = e.seq, event_hash = e.hash
  from ordo_event_heads(v_ch) e
  where x.tenant_id = e.tenant_id and x.run_id = e.run_id;
  return true;
end
$$;

revoke all on function ordo_engine_precondition(p jsonb) from public;
grant all on function ordo_engine_precondition(p jsonb) to ordo_system;
