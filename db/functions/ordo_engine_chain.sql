-- A chain of steps in one commit. A worker whose step succeeded may run the step after it before
-- that result commits, when nothing but its result can come of it: the next step is the only
-- dependent of the one before it and depends on it alone, its plugin has no effect outside its
-- result and it reaches no host, and it has no constraint and no concurrency limit. It then reports
-- the first step's result and the results of the steps it ran after it (the links) together, and
-- this function writes what one hop per result would have written: the same rows, transitions,
-- events in the same order and hashes, dispatch numbers and in-flight counts. Each link's attempt
-- is inserted once, succeeded (its whole life is inside the commit). Refused with OR001, writing
-- nothing, when a link is not the next step of its chain in this run (the worker then reports the
-- first result alone, and the links' steps run again from the queue), or in the cases the hop refuses.
--
-- The step the worker is still running after the last link (`ahead`: it did not finish within the
-- chain's time, or did not succeed) is dispatched to the worker like any successor, with the
-- traceparent its attempt already runs under; the worker then reports its result as that attempt's.
-- With no link, the function is the hop for one result with that step ahead.

create or replace function ordo_engine_chain(p jsonb) returns table (kind text, item jsonb)
  language plpgsql
  set jit = off
  set plan_cache_mode = force_generic_plan
  set enable_seqscan = off
  set enable_hashjoin = off
  set enable_mergejoin = off
  as $$
declare
  v_now timestamptz := date_trunc('milliseconds', now());
  v_worker text := p->>'worker';
  v_lease interval := make_interval(secs => (p->>'leaseMs')::numeric / 1000);
  v_capacity integer := greatest(0, (p->>'capacity')::integer);
  -- The tenant's in-flight cap (ordo_in_flight_cap), read when the last link's successors are handed out.
  v_cap integer;
  v_c jsonb := p->'head';
  v_t text := v_c->>'tenant_id';
  v_r uuid := (v_c->>'run_id')::uuid;
  v_s text := v_c->>'step_id';
  v_a integer := (v_c->>'attempt')::integer;
  v_ep integer := (v_c->>'epoch')::integer;
  v_o jsonb := nullif(v_c->'outputs', 'null'::jsonb);
  v_oh text := v_c->>'outputs_hash';
  v_lh text := v_c->>'logs_hash';
  v_links jsonb := coalesce(p->'links', '[]');
  v_n integer := jsonb_array_length(coalesce(p->'links', '[]'));
  v_last text;
  v_status text;
  v_remaining integer;
  v_dispatched integer;
  v_failed integer;
  v_dag text;
  v_version integer;
  v_trace text;
  v_rel integer;
  v_ready ordo_adv_ready[];
  v_disabled boolean;
  v_want integer := 0;
  v_in_flight integer;
  v_claim integer := 0;
  v_d jsonb[] := '{}';
  v_l jsonb[];
  v_end text;
  v_end_hash text;
  v_ch ordo_adv_chained[] := '{}';
  v_events ordo_adv_event[];
  v_ev ordo_adv_event;
  v_x jsonb;
  v_seq integer;
  v_prev text;
  v_hash text;
  v_created text := to_char(v_now at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"');
  v_done integer;
  v_ok integer;
  v_ahead text := p->'ahead'->>'step_id';
  v_ahead_tp text := p->'ahead'->>'traceparent';
begin
  if p->'head' is null then
    raise exception using errcode = 'OR001', message = 'a chain starts from one result';
  end if;
  if v_c->>'named_status' is not null then
    raise exception using errcode = 'OR001', message = 'a result with a named status goes through ordo_engine_advance';
  end if;
  v_last := coalesce(v_links->(v_n - 1)->>'step_id', v_s);
  perform set_config('ordo.notify_after_commit', 'on', true);

  -- The run, locked first (as every engine transaction locks it): it must be running.
  select x.status, x.steps_remaining, x.dispatch_count, x.steps_failed, x.dag_id, x.dag_version, x.trace_id,
    x.event_seq, x.event_hash
  into v_status, v_remaining, v_dispatched, v_failed, v_dag, v_version, v_trace, v_seq, v_prev
  from run x
  where x.tenant_id = v_t and x.run_id = v_r
  for update of x;
  if not found or v_status <> 'running' then
    raise exception using errcode = 'OR001', message = 'a run of the batch is not running';
  end if;

  -- Each link, in the order it ran: its step is pending on the step before it (the first result's
  -- for the first link) alone, never attempted, the only dependent of that step, not disabled and
  -- not limited, with the plugin and config the worker ran. (Not locked: a step is written only by
  -- a transaction that holds its run, as this one does.)
  if v_n > 0 then
    select count(*)::integer into v_ok
    from (
      select s.step_id
      from jsonb_array_elements(v_links) with ordinality as l(x, k)
      join step s on s.tenant_id = v_t and s.run_id = v_r and s.step_id = l.x->>'step_id'
      where s.status = 'pending' and s.pending_deps = 1 and s.attempts = 0
        and s.depends_on = array[case when l.k = 1 then v_s else v_links->(l.k::integer - 2)->>'step_id' end]
        and s.plugin = l.x->>'plugin' and s.config = l.x->'config'
        and not coalesce((s.spec->>'disabled')::boolean, false) and s.spec->>'concurrency' is null
        and s.spec->>'when' is null and s.spec->>'trigger' is null and not s.spec ? 'onStatus' and not s.spec ? 'statuses'
        and not s.spec ? 'preconditions'
        and not exists (
          select 1 from step o
          where o.tenant_id = v_t and o.run_id = v_r and o.step_id <> s.step_id and s.depends_on[1] = any(o.depends_on)
        )
    ) ok;
    if v_ok <> v_n then
      raise exception using errcode = 'OR001', message = 'a chained step is not the next step of its chain';
    end if;
  end if;

  -- One statement for the rows of the first result, which are all different rows: the step (it
  -- must still be running at the reported epoch), its attempt, its artifacts, its queue item (its
  -- slot is free), and the links queued (ready when the step before them finished); with no link,
  -- its dependents counted down (the ones left with no pending dependency become ready, in
  -- topological order, ties by step id).
  with res as (
    update step s set status = 'succeeded', outputs = coalesce(v_o, s.outputs), outputs_hash = v_oh,
      logs_hash = coalesce(v_lh, s.logs_hash), error = null, finished_at = now()
    where s.tenant_id = v_t and s.run_id = v_r and s.step_id = v_s and s.status = 'running' and s.epoch = v_ep
    returning 1
  ),
  att as (
    update attempt a set status = 'succeeded', outputs_hash = v_oh, logs_hash = v_lh,
      started_at = coalesce((v_c->>'started_at')::timestamptz, a.started_at), finished_at = coalesce((v_c->>'finished_at')::timestamptz, a.finished_at),
      terminated_at = now()
    where a.tenant_id = v_t and a.run_id = v_r and a.step_id = v_s and a.attempt = v_a and a.epoch = v_ep and a.status = 'running'
  ),
  art as (
    insert into artifact (tenant_id, sha256, media_type, size, body_json)
    select a.tenant_id, a.sha256, a.media_type, octet_length(a.body), a.body::jsonb
    from jsonb_to_recordset(p->'artifacts') as a(tenant_id text, sha256 text, media_type text, body text)
    on conflict do nothing
  ),
  item as (
    delete from queue_item q
    where q.tenant_id = v_t and q.run_id = v_r and q.step_id = v_s and q.epoch = v_ep
    returning 1
  ),
  q as (
    update step s set status = 'queued', pending_deps = 0,
      queued_at = coalesce(((case when l.k = 1 then v_c else v_links->(l.k::integer - 2) end)->>'finished_at')::timestamptz, now())
    from jsonb_array_elements(v_links) with ordinality as l(x, k)
    where s.tenant_id = v_t and s.run_id = v_r and s.step_id = l.x->>'step_id' and s.status = 'pending'
    returning 1
  ),
  deps as (
    update step s set pending_deps = s.pending_deps - 1,
      status = case when s.pending_deps = 1 and not coalesce((s.spec->>'disabled')::boolean, false)
        then 'queued' else s.status end,
      queued_at = case when s.pending_deps = 1 then now() else s.queued_at end
    where v_n = 0 and s.tenant_id = v_t and s.run_id = v_r and v_s = any(s.depends_on) and s.status = 'pending'
    returning s.step_id, s.topo_index, s.pending_deps, s.status, s.spec->>'concurrency' is not null as gated,
      s.spec->>'trigger' is not null or s.spec ? 'onStatus' as ruled
  )
  select (select count(*) from res)::integer, (select count(*) from item)::integer, (select count(*) from q)::integer,
    coalesce(array_agg(row(v_t, v_r, d.step_id, d.topo_index, false)::ordo_adv_ready order by d.topo_index, d.step_id)
      filter (where d.pending_deps = 0), '{}'),
    coalesce(bool_or(d.status <> 'queued' or d.gated) filter (where d.pending_deps = 0), false)
      or coalesce(bool_or(d.ruled), false)
  into v_done, v_rel, v_ok, v_ready, v_disabled
  from deps d;
  if v_done <> 1 then
    raise exception using errcode = 'OR001', message = 'a result of the batch is not current';
  end if;
  if v_ok <> v_n then
    raise exception using errcode = 'OR001', message = 'a chained step could not be queued';
  end if;

  if v_n > 0 then
    -- The links dispatched to this worker, in their order, each with its attempt as the claim makes
    -- it and its result applies it: written once, succeeded (its whole life is in this transaction).
    with d as (
      update step s set status = 'running', epoch = s.epoch + 1, attempts = s.attempts + 1,
        dispatch_seq = coalesce(s.dispatch_seq, v_dispatched + l.k::integer), started_at = coalesce(s.started_at, (l.x->>'started_at')::timestamptz, now())
      from jsonb_array_elements(v_links) with ordinality as l(x, k)
      where s.tenant_id = v_t and s.run_id = v_r and s.step_id = l.x->>'step_id' and s.status = 'queued'
      returning s.step_id, s.epoch, s.attempts, s.queued_at, v_dispatched + l.k::integer as dispatch_seq, l.k, l.x
    ),
    a as (
      insert into attempt (tenant_id, run_id, step_id, attempt, epoch, worker_id, status, lease_expires_at, traceparent,
        queued_at, claimed_at, constraint_checked_at, started_at, finished_at, terminated_at, outputs_hash, logs_hash)
      select v_t, v_r, d.step_id, d.attempts, d.epoch, v_worker, 'succeeded', now() + v_lease, d.x->>'traceparent', d.queued_at,
        coalesce((d.x->>'started_at')::timestamptz, now()), coalesce((d.x->>'started_at')::timestamptz, now()),
        (d.x->>'started_at')::timestamptz, (d.x->>'finished_at')::timestamptz, now(), d.x->>'outputs_hash', d.x->>'logs_hash'
      from d
      returning 1
    )
    select array_agg(jsonb_build_object('step_id', d.step_id, 'epoch', d.epoch, 'attempts', d.attempts,
        'dispatch_seq', d.dispatch_seq, 'x', d.x) order by d.k)
    into v_l
    from d;
    if coalesce(cardinality(v_l), 0) <> v_n then
      raise exception using errcode = 'OR001', message = 'a chained step could not be dispatched';
    end if;

    -- The links' results, and the dependents of the last link counted down (the ones left with no
    -- pending dependency become ready, in topological order, ties by step id).
    with res as (
      update step s set status = 'succeeded', outputs = nullif(l.x->'outputs', 'null'::jsonb), outputs_hash = l.x->>'outputs_hash',
        logs_hash = l.x->>'logs_hash', finished_at = now()
      from jsonb_array_elements(v_links) as l(x)
      where s.tenant_id = v_t and s.run_id = v_r and s.step_id = l.x->>'step_id' and s.status = 'running'
      returning 1
    ),
    deps as (
      update step s set pending_deps = s.pending_deps - 1,
        status = case when s.pending_deps = 1 and not coalesce((s.spec->>'disabled')::boolean, false)
          then 'queued' else s.status end,
        queued_at = case when s.pending_deps = 1 then now() else s.queued_at end
      where s.tenant_id = v_t and s.run_id = v_r and v_last = any(s.depends_on) and s.status = 'pending'
      returning s.step_id, s.topo_index, s.pending_deps, s.status, s.spec->>'concurrency' is not null as gated,
        s.spec->>'trigger' is not null or s.spec ? 'onStatus' as ruled
    )
    select (select count(*) from res)::integer,
      coalesce(array_agg(row(v_t, v_r, d.step_id, d.topo_index, false)::ordo_adv_ready order by d.topo_index, d.step_id)
        filter (where d.pending_deps = 0), '{}'),
      coalesce(bool_or(d.status <> 'queued' or d.gated) filter (where d.pending_deps = 0), false)
      or coalesce(bool_or(d.ruled), false)
    into v_done, v_ready, v_disabled
    from deps d;
    if v_done <> v_n then
      raise exception using errcode = 'OR001', message = 'a chained step could not be finished';
    end if;
  end if;
  if v_disabled then
    raise exception using errcode = 'OR001',
      message = 'a disabled or concurrency-limited step became ready, or a dependent has a trigger rule';
  end if;
  v_dispatched := v_dispatched + v_n;
  v_want := cardinality(v_ready);

  -- The last link's successors: as many go to this worker as it has room for and the tenant's cap
  -- allows: the slot the first result freed (the links ran in it), more only under the cap (the
  -- tenant's leased items, the first result's released, counted up to the cap).
  if v_want > 0 then
    select ordo_in_flight_cap(tq.max_in_flight, tq.weight, p) into v_cap
    from (select 1) o left join tenant_queue tq on tq.tenant_id = v_t;
    select count(*)::integer into v_in_flight
    from (select 1 from queue_item l where l.tenant_id = v_t and l.state = 'leased' limit v_cap) l;
    v_claim := least(v_want, v_capacity,
      case when v_want <= v_rel and v_in_flight + v_rel <= v_cap then v_want else greatest(0, v_cap - v_in_flight) end);

    if v_claim > 0 then
      with c as (
        select x.step_id, x.k
        from unnest(v_ready) with ordinality as x(tenant_id, run_id, step_id, topo_index, claim, k)
        where x.k <= v_claim
      ),
      d as (
        update step s set status = 'running', epoch = s.epoch + 1, attempts = s.attempts + 1,
          dispatch_seq = coalesce(s.dispatch_seq, v_dispatched + c.k::integer), started_at = coalesce(s.started_at, now())
        from c
        where s.tenant_id = v_t and s.run_id = v_r and s.step_id = c.step_id and s.status = 'queued'
        returning s.tenant_id, s.run_id, s.step_id, s.epoch, s.attempts, s.plugin, s.config, s.spec, s.depends_on, s.queued_at,
          v_dispatched + c.k::integer as dispatch_seq, c.k
      ),
      t as (
        select d.*, v_dag as dag_id, v_version as dag_version, v_trace as trace_id,
          case when d.step_id = v_ahead then v_ahead_tp
            else '00-' || v_trace || '-' || substr(md5(gen_random_uuid()::text), 1, 16) || '-01' end as traceparent
        from d
      ),
      l as (
        insert into queue_item (tenant_id, run_id, step_id, state, worker_id, epoch, lease_expires_at)
        select t.tenant_id, t.run_id, t.step_id, 'leased', v_worker, t.epoch, now() + v_lease from t
        returning 1
      ),
      a as (
        insert into attempt (tenant_id, run_id, step_id, attempt, epoch, worker_id, lease_expires_at, traceparent, queued_at,
          claimed_at, constraint_checked_at)
        select t.tenant_id, t.run_id, t.step_id, t.attempts, t.epoch, v_worker, now() + v_lease, t.traceparent,
          coalesce(t.queued_at, now()), now(), now()
        from t
        returning 1
      )
      select coalesce(array_agg(to_jsonb(t) order by t.k), '{}') into v_d from t;
      if cardinality(v_d) <> v_claim then
        raise exception using errcode = 'OR001', message = 'a ready step could not be dispatched';
      end if;
    end if;

    if v_claim < v_want then
      insert into queue_item (tenant_id, run_id, step_id, priority)
      select x.tenant_id, x.run_id, x.step_id, coalesce((s.spec->>'priority')::smallint, 5)
      from unnest(v_ready) with ordinality as x(tenant_id, run_id, step_id, topo_index, claim, k)
      join step s on s.tenant_id = x.tenant_id and s.run_id = x.run_id and s.step_id = x.step_id
      where x.k > v_claim
      order by x.k;
      perform ordo_notify('ordo_ready', v_t);
    end if;
  end if;

  -- A slot freed and not taken again: a tenant with ready steps wakes the workers (a claim may have
  -- passed it over at its cap).
  if v_rel > v_claim and exists (select 1 from queue_item q where q.tenant_id = v_t and q.state = 'ready') then
    perform ordo_notify('ordo_ready', v_t);
  end if;

  -- A run with no step left ends here (as in the hop).
  if v_remaining - 1 - v_n <= 0 then
    if exists (
      select 1 from dag_version dv
      where dv.tenant_id = v_t and dv.dag_id = v_dag and dv.definition->'constraints' ? 'maxConcurrentRuns'
    ) and exists (
      select 1 from run w where w.tenant_id = v_t and w.dag_id = v_dag and w.status = 'queued' and not w.admitted
    ) then
      raise exception using errcode = 'OR001', message = 'a run waits for a maxConcurrentRuns slot';
    end if;
    -- (A run that ends failed and enters the dead-letter ends in the hop, the dead-letter's one home.)
    if v_failed > 0 and exists (
      select 1 from dag_version dv
      where dv.tenant_id = v_t and dv.dag_id = v_dag and dv.version = v_version
        and dv.definition->>'onFailure' = 'deadletter'
    ) then
      raise exception using errcode = 'OR001', message = 'a failed run enters the dead-letter';
    end if;
    v_end := case when v_failed > 0 then 'run.failed' else 'run.succeeded' end;
    v_end_hash := ordo_run_outputs_hash(v_t, v_r);
    -- A child run of a `dag` step that ends resumes its parent's step (as in the hop).
    perform graphile_worker.add_job('ordo.engine.child_ended',
      json_build_object('tenantId', x.tenant_id, 'runId', x.parent_run_id, 'stepId', x.parent_step_id,
        'childRunId', x.run_id),
      job_key => 'child:' || x.tenant_id || ':' || x.run_id, max_attempts => 25)
    from run x where x.tenant_id = v_t and x.run_id = v_r and x.parent_run_id is not null;
  end if;

  -- The events, in the order one hop per result writes them: the first result; for each link, it
  -- queued, dispatched and succeeded; the last link's successors queued and dispatched; the run's end.
  v_events := array[row(v_t, v_r, 0, 'step.succeeded', v_s, v_a, v_worker,
    '{"outputsHash":' || to_json(v_oh)::text || '}')::ordo_adv_event];
  foreach v_x in array coalesce(v_l, '{}') loop
    v_events := v_events
      || row(v_t, v_r, 0, 'step.queued', v_x->>'step_id', null, 'engine', '{}')::ordo_adv_event
      || row(v_t, v_r, 0, 'step.running', v_x->>'step_id', (v_x->>'attempts')::integer, v_worker,
        '{"dispatchSeq":' || (v_x->>'dispatch_seq') || ',"epoch":' || (v_x->>'epoch') || '}')::ordo_adv_event
      || row(v_t, v_r, 0, 'step.succeeded', v_x->>'step_id', (v_x->>'attempts')::integer, v_worker,
        '{"outputsHash":' || to_json(v_x->'x'->>'outputs_hash')::text || '}')::ordo_adv_event;
  end loop;
  v_events := v_events || array(
    select u.e from (
      select row(v_t, v_r, 1000000 + x.k::integer, 'step.queued', x.step_id, null, 'engine', '{}')::ordo_adv_event as e
      from unnest(v_ready) with ordinality as x(tenant_id, run_id, step_id, topo_index, claim, k)
      union all
      select row(v_t, v_r, 2000000 + (x->>'k')::integer, 'step.running', x->>'step_id', (x->>'attempts')::integer, v_worker,
        '{"dispatchSeq":' || (x->>'dispatch_seq') || ',"epoch":' || (x->>'epoch') || '}')::ordo_adv_event
      from unnest(v_d) x
      union all
      select row(v_t, v_r, 3000000, v_end, null, null, 'engine', '{"outputsHash":' || to_json(v_end_hash)::text || '}')::ordo_adv_event
      where v_end is not null
    ) u
    order by (u.e).ord
  );
  foreach v_ev in array v_events loop
    v_seq := v_seq + 1;
    v_hash := ordo_event_hash(v_prev, v_r, v_seq, v_created, v_ev.type, v_ev.step_id, v_ev.attempt, v_ev.actor, v_ev.data);
    v_ch := v_ch || row(v_t, v_r, v_seq, v_ev.type, v_ev.step_id, v_ev.attempt, v_ev.actor, v_ev.data, v_prev, v_hash)::ordo_adv_chained;
    v_prev := v_hash;
  end loop;

  with ev as (
    insert into run_event (tenant_id, run_id, seq, created_at, type, step_id, attempt, actor, data, prev_hash, hash)
    select e.tenant_id, e.run_id, e.seq, v_now, e.type, e.step_id, e.attempt, e.actor, e.data::jsonb, e.prev_hash, e.hash
    from unnest(v_ch) e order by e.seq
  )
  update run x set event_seq = v_seq, event_hash = v_prev,
    dispatch_count = x.dispatch_count + v_n + v_claim,
    steps_remaining = x.steps_remaining - 1 - v_n,
    status = coalesce(substr(v_end, 5), x.status),
    finished_at = case when v_end is null then x.finished_at else coalesce(x.finished_at, now()) end,
    outputs_hash = case when v_end is null then x.outputs_hash else v_end_hash end
  where x.tenant_id = v_t and x.run_id = v_r;

  if v_end is null then
    return query select 'dispatch'::text, x - 'k' from unnest(v_d) x
    union all
    select 'notify'::text, x from ordo_take_notifications() x;
    return;
  end if;
  perform ordo_notify('ordo_run_finished', v_r::text);
  return query
    select 'dispatch'::text, x - 'k' from unnest(v_d) x
    union all
    select 'event'::text, x from ordo_events_out(v_ch, v_now) x
    union all
    select 'notify'::text, x from ordo_take_notifications() x;
end
$$;

revoke all on function ordo_engine_chain(jsonb) from public;
grant all on function ordo_engine_chain(jsonb) to ordo_system;
