-- When runs end (`p_ended`), runs of the same DAGs waiting for a maxConcurrentRuns slot (the
-- constraint's `queue` action) start in the same transaction, oldest first, as many per DAG as its
-- limit (the waiting run's own version's) leaves free once the ended runs no longer count: each is
-- admitted (run.admitted), its ready steps queued (step.queued, into the ready queue under their
-- gates) and the tenant's workers woken. The DAGs are locked (an advisory lock per tenant and DAG,
-- as run creation takes to count their active runs) and the admitted runs after them, in key order.
-- Returns the events appended.

create or replace function ordo_admit_waiting(p_ended ordo_adv_ending[], p_at timestamptz) returns ordo_adv_chained[]
  language plpgsql
  set jit = off
  as $$
declare
  v_admit ordo_run_key[];
  v_steps ordo_adv_ready[];
  v_ch ordo_adv_chained[];
begin
  -- The DAGs with waiting runs, locked in key order.
  perform pg_advisory_xact_lock(hashtext(d.tenant_id || '/' || d.dag_id))
  from (
    select distinct e.tenant_id, e.dag_id from unnest(p_ended) e
    where exists (
      select 1 from run w where w.tenant_id = e.tenant_id and w.dag_id = e.dag_id and w.status = 'queued' and not w.admitted
    )
    order by 1, 2
  ) d;
  if not found then
    return '{}';
  end if;

  -- Per DAG, the waiting runs its limit leaves room for, oldest first; locked in key order.
  v_admit := array(
    select row(a.tenant_id, a.run_id)::ordo_run_key from (
      select w.tenant_id, w.run_id from (
        select r.tenant_id, r.run_id, r.dag_id, r.dag_version,
          row_number() over (partition by r.tenant_id, r.dag_id order by r.created_at, r.run_id) as rn
        from run r join (select distinct e.tenant_id, e.dag_id from unnest(p_ended) e) d
          on r.tenant_id = d.tenant_id and r.dag_id = d.dag_id
        where r.status = 'queued' and not r.admitted
      ) w
      join dag_version dv on dv.tenant_id = w.tenant_id and dv.dag_id = w.dag_id and dv.version = w.dag_version
      where w.rn <= coalesce((dv.definition->'constraints'->'maxConcurrentRuns'->>'limit')::integer, 1000000) - (
        select count(*) from run r
        where r.tenant_id = w.tenant_id and r.dag_id = w.dag_id and r.status in ('queued', 'running') and r.admitted
          and not exists (select 1 from unnest(p_ended) e where e.tenant_id = r.tenant_id and e.run_id = r.run_id)
      )
    ) a
    join run r on r.tenant_id = a.tenant_id and r.run_id = a.run_id
    order by a.tenant_id, a.run_id
    for update of r
  );
  if cardinality(v_admit) = 0 then
    return '{}';
  end if;

  update run r set admitted = true
  from unnest(v_admit) k where r.tenant_id = k.tenant_id and r.run_id = k.run_id;
  with q as (
    update step s set status = 'queued', queued_at = now()
    from unnest(v_admit) k
    where s.tenant_id = k.tenant_id and s.run_id = k.run_id and s.status = 'pending' and s.pending_deps = 0
    returning s.tenant_id, s.run_id, s.step_id, s.topo_index, s.spec
  ),
  i as (
    insert into queue_item (tenant_id, run_id, step_id, gate, gate_limit, priority)
    select q.tenant_id, q.run_id, q.step_id,
      ordo_step_gate(r.dag_id, q.step_id, q.spec), (q.spec->>'concurrency')::integer, coalesce((q.spec->>'priority')::smallint, 5)
    from q join run r on r.tenant_id = q.tenant_id and r.run_id = q.run_id
    order by q.tenant_id, q.run_id, q.topo_index, q.step_id
    returning 1
  )
  select coalesce(array_agg(row(q.tenant_id, q.run_id, q.step_id, q.topo_index, false)::ordo_adv_ready
    order by q.tenant_id, q.run_id, q.topo_index, q.step_id), '{}')
  into v_steps
  from q;
  perform ordo_notify('ordo_ready', t.tenant_id) from (select distinct k.tenant_id from unnest(v_admit) k) t;

  v_ch := ordo_append_events(array(
    select row(k.tenant_id, k.run_id, 0, 'run.admitted', null, null, 'engine', '{"reason":"max_concurrent_runs"}')::ordo_adv_event
    from unnest(v_admit) k
    union all
    select row(s.tenant_id, s.run_id, n::integer, 'step.queued', s.step_id, null, 'engine', '{}')::ordo_adv_event
    from unnest(v_steps) with ordinality as s(tenant_id, run_id, step_id, topo_index, claim, n)
  ), p_at);
  update run r set event_seq = last.seq, event_hash = last.hash
  from ordo_event_heads(v_ch) last where r.tenant_id = last.tenant_id and r.run_id = last.run_id;
  return v_ch;
end
$$;

revoke all on function ordo_admit_waiting(ordo_adv_ending[], timestamptz) from public;
grant all on function ordo_admit_waiting(ordo_adv_ending[], timestamptz) to ordo_system, ordo_app;
