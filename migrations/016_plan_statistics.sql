-- Statistics for the re-plans of the hot statements. The engine's cached generic plans are made
-- again when a hot table has doubled or halved (PlanRefresh, src/core/database/prepared.ts); made
-- without statistics, such a plan still guesses that a tenant's share of a table is small, and may
-- reach runs through an index that leads with tenant_id only (a partial one looks cheapest: the
-- claim's dispatch went through run_dag_active_idx and read every active run of the tenant for each
-- item). So the process that sees a table grow analyzes it first. The system role owns no table,
-- hence this function, which analyzes only these tables and skips one that autovacuum holds.
create function ordo_analyze_hot(p_tables text[]) returns void
  language plpgsql
  security definer
  set search_path = pg_catalog, public
  as $$
declare
  v_table text;
begin
  foreach v_table in array p_tables loop
    if v_table = any (array['run', 'step', 'queue_item', 'attempt', 'run_event', 'tenant_queue', 'artifact']) then
      execute format('analyze (skip_locked) public.%I', v_table);
    end if;
  end loop;
end
$$;
revoke all on function ordo_analyze_hot(text[]) from public;
grant execute on function ordo_analyze_hot(text[]) to ordo_system;
