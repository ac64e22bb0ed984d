-- The months (their first instant, UTC) that have rows in a time-partitioned table's default
-- partition (see ordo_partitions_ensure): one scan of the default partition, which is empty
-- unless rows came for a month not made yet.

create or replace function ordo_partitions_default_months(p_table text, p_col text)
  returns setof timestamptz
  language plpgsql
  stable
  set search_path = pg_catalog, public
  as $$
begin
  return query execute format(
    'select distinct date_trunc(''month'', %I at time zone ''UTC'') at time zone ''UTC'' from public.%I',
    p_col, p_table || '_default');
end
$$;

revoke all on function ordo_partitions_default_months(text, text) from public;
