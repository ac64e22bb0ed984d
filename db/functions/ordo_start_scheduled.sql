-- A scheduled run's notBefore came (the start job, db/functions/ordo_create_runs.sql): the run,
-- still scheduled, is queued (run.queued) and its ready steps queued (step.queued, in topological
-- order with ties by step id, into the ready queue under their gates and priorities), and its
-- tenant's workers woken; its first dispatch then starts it (run.running) as any run. A run that is
-- no longer scheduled (cancelled meanwhile, or started by an earlier try of the job) is left as it
-- is. Returns whether it started the run.

create or replace function ordo_start_scheduled(p_tenant text, p_run uuid) returns boolean
  language plpgsql
  set jit = off
  as $$
declare
  v_now timestamptz := date_trunc('milliseconds', now());
  v_steps ordo_adv_ready[];
  v_ch ordo_adv_chained[];
begin
  perform 1 from run x where x.tenant_id = p_tenant and x.run_id = p_run and x.status = 'scheduled'
  for update of x;
  if not found then
    return false;
  end if;
  update run x set status = 'queued' where x.tenant_id = p_tenant and x.run_id = p_run;
  with q as (
    update step s set status = 'queued', queued_at = now()
    where s.tenant_id = p_tenant and s.run_id = p_run and s.status = 'pending' and s.pending_deps = 0
    returning s.tenant_id, s.run_id, s.step_id, s.topo_index, s.spec
  ),
  i as (
    insert into queue_item (tenant_id, run_id, step_id, gate, gate_limit, priority)
    select q.tenant_id, q.run_id, q.step_id, ordo_step_gate(r.dag_id, q.step_id, q.spec),
      (q.spec->>'concurrency')::integer, coalesce((q.spec->>'priority')::smallint, 5)
    from q join run r on r.tenant_id = q.tenant_id and r.run_id = q.run_id
    order by q.topo_index, q.step_id
    returning 1
  )
  select coalesce(array_agg(row(q.tenant_id, q.run_id, q.step_id, q.topo_index, false)::ordo_adv_ready
    order by q.topo_index, q.step_id), '{}')
  into v_steps
  from q;
  insert into tenant_queue (tenant_id) values (p_tenant) on conflict (tenant_id) do nothing;
  perform ordo_notify('ordo_ready', p_tenant);

  v_ch := ordo_append_events(array(
    select row(p_tenant, p_run, 0, 'run.queued', null, null, 'engine', '{"reason":"not_before"}')::ordo_adv_event
    union all
    select row(s.tenant_id, s.run_id, n::integer, 'step.queued', s.step_id, null, 'engine', '{}')::ordo_adv_event
    from unnest(v_steps) with ordinality as s(tenant_id, run_id, step_id, topo_index, claim, n)
  ), v_now);
  update run x set event_seq = e.seq, event_hash = e.hash
  from ordo_event_heads(v_ch) e
  where x.tenant_id = e.tenant_id and x.run_id = e.run_id;
  return true;
end
$$;

revoke all on function ordo_start_scheduled(text, uuid) from public;
grant all on function ordo_start_scheduled(text, uuid) to ordo_system;
