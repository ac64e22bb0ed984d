-- Analyzes the engine's hot tables for the system role, which owns no table (PlanRefresh,
-- src/core/database/prepared.ts, calls it when a table has doubled or halved, before its statements
-- are planned again): without fresh statistics a re-made generic plan may guess a tenant's share of a
-- table small and reach runs through an index that leads with tenant_id only. A table autovacuum holds
-- is skipped.

create or replace function ordo_analyze_hot(p_tables text[]) returns void
  language plpgsql
  security definer
  set search_path = pg_catalog, public
  as $$
declare
  v_table text;
begin
  foreach v_table in array p_tables loop
    if v_table = any (array['run', 'step', 'queue_item', 'attempt', 'run_event', 'tenant_queue', 'artifact', 'worker_task']) then
      execute format('analyze (skip_locked) public.%I', v_table);
    end if;
  end loop;
end
$$;

revoke all on function ordo_analyze_hot(p_tables text[]) from public;
grant all on function ordo_analyze_hot(p_tables text[]) to ordo_system;
