-- Whether a worker (its columns) could ever take a task of `p_task_type` with `p_requires` (the only home of this
-- rule; ordo_task_dispatch and ordo_task_wait_reason use it): it is online and heard from within its
-- TTL, handles the task type, and has at least the gpus, vram, cpus and memory required, every model
-- listed installed and every label equal. Whether it has room or is blocked is the caller's to ask.
-- Required sizes are compared as numerics: a stored requirement beyond bigint fits no worker
-- rather than failing the pool's dispatch.

create or replace function ordo_worker_fits(
  p_status text, p_last_seen timestamptz, p_ttl_ms integer, p_task_types jsonb, p_gpu_count integer, p_vram bigint,
  p_cpu numeric, p_memory bigint, p_models text[], p_labels jsonb, p_task_type text, p_requires jsonb
) returns boolean
  language sql
  stable
  as $$
  select p_status = 'online'
    and p_last_seen + make_interval(secs => p_ttl_ms::numeric / 1000) > now()
    and p_task_types ? p_task_type
    and p_gpu_count >= coalesce((p_requires->>'gpu')::integer, 0)
    and p_vram >= coalesce((p_requires->>'vramBytes')::numeric, 0)
    and coalesce(p_cpu, 0) >= coalesce((p_requires->>'cpu')::numeric, 0)
    and coalesce(p_memory, 0) >= coalesce((p_requires->>'memoryBytes')::numeric, 0)
    and p_models @> array(select jsonb_array_elements_text(coalesce(p_requires->'models', '[]')))
    and p_labels @> coalesce(p_requires->'labels', '{}')
$$;

grant all on function ordo_worker_fits(text, timestamptz, integer, jsonb, integer, bigint, numeric, bigint, text[], jsonb, text, jsonb)
  to ordo_app, ordo_system;
