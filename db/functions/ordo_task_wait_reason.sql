-- Why a pending task of a pool has no worker, computed when asked from the state dispatch uses
-- (ordo_task_dispatch): `workers_busy` when an online worker of the pool within its TTL could take
-- it but is full or blocked, else `no_matching_worker` (none handles its task type with its
-- requirements).

create or replace function ordo_task_wait_reason(p_tenant text, p_pool text, p_task_type text, p_requires jsonb)
  returns text
  language sql
  stable
  as $$
  select case when exists (
      select 1 from worker w
      where w.tenant_id = p_tenant and w.pool = p_pool and w.status = 'online'
        and w.last_seen_at + make_interval(secs => w.ttl_ms::numeric / 1000) > now()
        and w.task_types ? p_task_type
        and w.gpu_count >= coalesce((p_requires->>'gpu')::integer, 0)
        and w.vram_bytes >= coalesce((p_requires->>'vramBytes')::bigint, 0)
        and coalesce(w.cpu, 0) >= coalesce((p_requires->>'cpu')::numeric, 0)
        and coalesce(w.memory_bytes, 0) >= coalesce((p_requires->>'memoryBytes')::bigint, 0)
        and w.models @> array(select jsonb_array_elements_text(coalesce(p_requires->'models', '[]')))
        and w.labels @> coalesce(p_requires->'labels', '{}')
    ) then 'workers_busy' else 'no_matching_worker' end
$$;

grant all on function ordo_task_wait_reason(text, text, text, jsonb) to ordo_app, ordo_system;
