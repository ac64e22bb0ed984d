-- Why a pending task of a pool has no worker, computed when asked from the state dispatch uses
-- (ordo_task_dispatch): `workers_busy` when a worker of the pool fits it (ordo_worker_fits) but is
-- full or blocked, else `no_matching_worker`.

create or replace function ordo_task_wait_reason(p_tenant text, p_pool text, p_task_type text, p_requires jsonb)
  returns text
  language sql
  stable
  as $$
  select case when exists (
      select 1 from worker w
      where w.tenant_id = p_tenant and w.pool = p_pool
        and ordo_worker_fits(w.status, w.last_seen_at, w.ttl_ms, w.task_types, w.gpu_count, w.vram_bytes, w.cpu,
          w.memory_bytes, w.models, w.labels, p_task_type, p_requires)
    ) then 'workers_busy' else 'no_matching_worker' end
$$;

grant all on function ordo_task_wait_reason(text, text, text, jsonb) to ordo_app, ordo_system;
