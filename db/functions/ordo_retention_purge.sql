-- One batch of a tenant's retention by rows: deletes up to p_limit of its runs that retention does
-- not keep (ordo_retention_keeps), oldest first, with everything of theirs (events, attempts,
-- spans, steps, queue items, signal waits and delivered signals, external worker tasks, dead-letter
-- entries), notes the artifacts they named as candidates for ordo_retention_sweep_artifacts, and
-- records what it removed in retention_log. Runs another transaction holds are left for a later batch.
-- Events are append-only (run_event_append_only): this function is the one place that deletes
-- them, and says so to the trigger for the statement's transaction only. The rows of the
-- partitioned tables are found from the batch's oldest run's creation (less a day: a span may start
-- just before its run), so older month partitions are not read. Returns the runs deleted.
-- Security definer: the system role that calls it has no DELETE on these tables. Row-level
-- security is forced on them, for their owner too: the function binds the transaction to the
-- tenant (app.tenant_id), so it reads and deletes that tenant's rows only. Its statements are
-- planned for each batch's values (a batch is rare and large): a generic plan cached from the
-- session's earlier batches, made for smaller tables, can be many times slower.

create or replace function ordo_retention_purge(p_tenant text, p_cutoff timestamptz, p_requires_export boolean,
  p_limit integer)
  returns integer
  language plpgsql
  security definer
  set search_path = pg_catalog, public
  set plan_cache_mode = force_custom_plan
  as $$
declare
  v_ids uuid[];
  v_from timestamptz;
  v_hashes text[];
  v_events bigint;
  v_attempts bigint;
  v_spans bigint;
  v_steps bigint;
begin
  perform set_config('app.tenant_id', p_tenant, true);
  select array_agg(r.run_id), min(r.created_at) - interval '1 day' into v_ids, v_from
  from (
    select r.run_id, r.created_at from run r
    where r.tenant_id = p_tenant and r.created_at < p_cutoff and not ordo_retention_keeps(r, p_cutoff, p_requires_export)
    order by r.created_at
    limit p_limit
    for update skip locked
  ) r;
  if v_ids is null then
    perform set_config('app.tenant_id', '', true);
    return 0;
  end if;

  select array_agg(distinct h) into v_hashes
  from (
    select unnest(array[s.outputs_hash, s.logs_hash]) as h from step s
    where s.tenant_id = p_tenant and s.run_id = any (v_ids)
    union all
    select unnest(array[a.outputs_hash, a.logs_hash]) from attempt a
    where a.tenant_id = p_tenant and a.run_id = any (v_ids) and a.created_at >= v_from
  ) x
  where h is not null;

  perform set_config('ordo.retention_purge', 'on', true);
  delete from run_event e where e.tenant_id = p_tenant and e.run_id = any (v_ids) and e.created_at >= v_from;
  get diagnostics v_events = row_count;
  perform set_config('ordo.retention_purge', '', true);
  delete from attempt a where a.tenant_id = p_tenant and a.run_id = any (v_ids) and a.created_at >= v_from;
  get diagnostics v_attempts = row_count;
  delete from span s where s.tenant_id = p_tenant and s.run_id = any (v_ids) and s.started_at >= v_from;
  get diagnostics v_spans = row_count;
  delete from queue_item q where q.tenant_id = p_tenant and q.run_id = any (v_ids);
  delete from signal_wait w where w.tenant_id = p_tenant and w.run_id = any (v_ids);
  delete from signal g where g.tenant_id = p_tenant and g.run_id = any (v_ids);
  delete from worker_task t where t.tenant_id = p_tenant and t.run_id = any (v_ids);
  delete from dead_letter d where d.tenant_id = p_tenant and d.run_id = any (v_ids);
  delete from step s where s.tenant_id = p_tenant and s.run_id = any (v_ids);
  get diagnostics v_steps = row_count;
  delete from run r where r.tenant_id = p_tenant and r.run_id = any (v_ids);

  insert into artifact_candidate (tenant_id, sha256)
  select p_tenant, h from unnest(coalesce(v_hashes, '{}')) h
  on conflict do nothing;

  insert into retention_log (tenant_id, action, detail)
  values (p_tenant, 'runs_deleted', jsonb_build_object('cutoff', p_cutoff, 'requiresExport', p_requires_export,
    'runs', cardinality(v_ids), 'steps', v_steps, 'events', v_events, 'attempts', v_attempts, 'spans', v_spans));
  perform set_config('app.tenant_id', '', true);
  return cardinality(v_ids);
end
$$;

revoke all on function ordo_retention_purge(text, timestamptz, boolean, integer) from public;
grant all on function ordo_retention_purge(text, timestamptz, boolean, integer) to ordo_system;
