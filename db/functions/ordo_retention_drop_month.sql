-- Retention by partition: drops the month partitions (run_event, attempt, span; see
-- ordo_partitions_ensure) of the month starting at p_month when no tenant needs a row in them any
-- more, instead of deleting their rows one by one. p_policies holds each tenant with a retention
-- period: [{"tenantId", "cutoff", "requiresExport"}]. The month goes only when it has ended and
-- every tenant with rows in any of its partitions has a policy whose cutoff is at or after the
-- month's end and keeps none of its runs created before then (ordo_retention_keeps; a day's margin
-- for spans that start before their run), so no run that stays loses a row. The runs themselves
-- (run and step rows, rows of theirs in later months) are then retention's batched deletes
-- (ordo_retention_purge), which they qualify for.
--
-- The checks read without locks; then each partition is detached and dropped, which takes the
-- parent's ACCESS EXCLUSIVE lock until the transaction ends: a catalog change, milliseconds, with
-- lock_timeout bounding the wait for it (on timeout nothing is dropped; the next run tries again).
-- DETACH ... CONCURRENTLY is not possible on a table with a default partition. Call it in a
-- transaction of its own. Returns {"dropped", "partitions", "tenants", "heldBy"?, "lockedMs"}.

create or replace function ordo_retention_drop_month(p_month timestamptz, p_policies jsonb)
  returns jsonb
  language plpgsql
  security definer
  set search_path = pg_catalog, public
  as $$
declare
  v_hi timestamptz := p_month + interval '1 month';
  v_tab record;
  v_name text;
  v_parts text[] := '{}';
  v_tenants text[] := '{}';
  v_some text[];
  v_t text;
  v_p jsonb;
  v_locked timestamptz;
begin
  if p_month <> date_trunc('month', p_month at time zone 'UTC') at time zone 'UTC' then
    raise exception 'not the first instant of a month in UTC: %', p_month using errcode = 'invalid_parameter_value';
  end if;
  if v_hi > date_trunc('month', now() at time zone 'UTC') at time zone 'UTC' then
    return jsonb_build_object('dropped', false, 'partitions', '[]'::jsonb, 'tenants', '[]'::jsonb, 'reason', 'not ended');
  end if;
  for v_tab in select * from (values ('run_event'), ('attempt'), ('span')) as t(tbl) loop
    v_name := v_tab.tbl || '_p' || to_char(p_month at time zone 'UTC', 'YYYY_MM');
    continue when to_regclass('public.' || v_name) is null;
    v_parts := v_parts || v_name;
    -- The partition's tenants, one index probe each (a loose scan of its primary key).
    execute format($q$
      with recursive t(tenant_id) as (
        (select tenant_id from public.%1$I order by tenant_id limit 1)
        union all
        select (select p.tenant_id from public.%1$I p where p.tenant_id > t.tenant_id order by p.tenant_id limit 1)
        from t where t.tenant_id is not null)
      select coalesce(array_agg(tenant_id), '{}') from t where tenant_id is not null$q$, v_name)
      into v_some;
    v_tenants := array(select distinct u from unnest(v_tenants || v_some) as u order by u);
  end loop;
  if cardinality(v_parts) = 0 then
    return jsonb_build_object('dropped', false, 'partitions', '[]'::jsonb, 'tenants', '[]'::jsonb, 'reason', 'no partitions');
  end if;

  -- Row-level security is forced on run for its owner too: each tenant's runs are read bound to it.
  foreach v_t in array v_tenants loop
    perform set_config('app.tenant_id', v_t, true);
    select e into v_p from jsonb_array_elements(p_policies) e where e->>'tenantId' = v_t;
    if v_p is null or (v_p->>'cutoff')::timestamptz < v_hi or exists (
      select 1 from run r
      where r.tenant_id = v_t and r.created_at < v_hi + interval '1 day'
        and ordo_retention_keeps(r, (v_p->>'cutoff')::timestamptz, coalesce((v_p->>'requiresExport')::boolean, false))
    ) then
      return jsonb_build_object('dropped', false, 'partitions', to_jsonb(v_parts), 'tenants', to_jsonb(v_tenants),
        'heldBy', v_t);
    end if;
  end loop;

  perform set_config('lock_timeout', '2s', true);
  v_locked := clock_timestamp();
  foreach v_name in array v_parts loop
    execute format('alter table public.%I detach partition public.%I', substring(v_name from '^(.*)_p\d{4}_\d{2}$'), v_name);
    execute format('drop table public.%I', v_name);
  end loop;
  foreach v_t in array v_tenants loop
    perform set_config('app.tenant_id', v_t, true);
    insert into retention_log (tenant_id, action, detail)
    values (v_t, 'partition_dropped', jsonb_build_object('month', p_month, 'partitions', to_jsonb(v_parts)));
  end loop;
  perform set_config('app.tenant_id', '', true);
  return jsonb_build_object('dropped', true, 'partitions', to_jsonb(v_parts), 'tenants', to_jsonb(v_tenants),
    'lockedMs', extract(epoch from clock_timestamp() - v_locked) * 1000);
end
$$;

revoke all on function ordo_retention_drop_month(timestamptz, jsonb) from public;
grant all on function ordo_retention_drop_month(timestamptz, jsonb) to ordo_system;
