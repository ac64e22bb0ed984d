-- The sweep of a tenant's artifact candidates (artifact_candidate, noted by ordo_retention_purge):
-- deletes the candidates' artifacts that no step or attempt of the tenant names any more, and the
-- candidates, and records the count in retention_log. The tenant's steps and attempts are each
-- read once, joined to the candidates by hash (there is no index on their hashes: the engine's
-- writes stay as they are), so the cost is one pass over what the tenant keeps, whatever the number
-- of candidates. Returns the artifacts deleted. Security definer and bound to the tenant like
-- ordo_retention_purge.
--
-- Only rows made at least two days before the sweep's day are deleted. A writer stores an artifact
-- with `on conflict do nothing` on (tenant, hash, its own day) and takes no lock on the row it
-- finds there, so until it commits the step that names the hash nothing shows that the row is in
-- use: a row of the writer's day is never the sweep's to delete (the two days cover sessions whose
-- time zones put them on different dates), and a writer that finds no row of its day inserts one.
-- A candidate whose unnamed hash still has newer rows stays noted for a later pass.

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
  unnamed as (
    select cand.h from cand where cand.h not in (select named.h from named)
  ),
  gone as (
    delete from artifact f
    using unnamed
    where f.tenant_id = p_tenant and f.sha256 = unnamed.h and f.created_on < current_date - 2
    returning 1
  ),
  later as (
    insert into artifact_candidate (tenant_id, sha256)
    select p_tenant, unnamed.h from unnamed
    where exists (
      select 1 from artifact f where f.tenant_id = p_tenant and f.sha256 = unnamed.h and f.created_on >= current_date - 2)
    on conflict do nothing
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
