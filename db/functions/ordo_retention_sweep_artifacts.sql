-- The sweep of a tenant's artifact candidates (artifact_candidate, noted by ordo_retention_purge):
-- deletes the candidates' artifacts that no step or attempt of the tenant names any more, and the
-- candidates, and records the count in retention_log. The tenant's steps and attempts are each
-- read once, joined to the candidates by hash (there is no index on their hashes: the engine's
-- writes stay as they are), so the cost is one pass over what the tenant keeps, whatever the number
-- of candidates. Returns the artifacts deleted. Security definer and bound to the tenant like
-- ordo_retention_purge.

create or replace function ordo_retention_sweep_artifacts(p_tenant text)
  returns integer
  language plpgsql
  security definer
  set search_path = pg_catalog, public
  as $$
declare
  v_cand text[];
  v_n integer;
begin
  perform set_config('app.tenant_id', p_tenant, true);
  with c as (
    delete from artifact_candidate k where k.tenant_id = p_tenant returning k.sha256
  )
  select array_agg(c.sha256) into v_cand from c;
  if v_cand is null then
    perform set_config('app.tenant_id', '', true);
    return 0;
  end if;

  with cand as (
    select h from unnest(v_cand) h
  ),
  named as (
    select x.h from step s
    cross join lateral unnest(array[s.outputs_hash, s.logs_hash]) x(h)
    join cand on cand.h = x.h
    where s.tenant_id = p_tenant
    union
    select x.h from attempt a
    cross join lateral unnest(array[a.outputs_hash, a.logs_hash]) x(h)
    join cand on cand.h = x.h
    where a.tenant_id = p_tenant
  ),
  gone as (
    delete from artifact f
    using cand
    where f.tenant_id = p_tenant and f.sha256 = cand.h and cand.h not in (select named.h from named)
    returning 1
  )
  select count(*) into v_n from gone;

  if v_n > 0 then
    insert into retention_log (tenant_id, action, detail)
    values (p_tenant, 'artifacts_deleted', jsonb_build_object('artifacts', v_n, 'candidates', cardinality(v_cand)));
  end if;
  perform set_config('app.tenant_id', '', true);
  return v_n;
end
$$;

revoke all on function ordo_retention_sweep_artifacts(text) from public;
grant all on function ordo_retention_sweep_artifacts(text) to ordo_system;
