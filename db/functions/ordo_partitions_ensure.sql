-- The month partitions of the time-partitioned tables (run_event by created_at, attempt by
-- created_at, span by started_at; db/migrations/022_partitions.sql): each month, in UTC, is a
-- partition named <table>_pYYYY_MM holding [first instant of the month, first of the next). This
-- function makes the partitions of the current month and the p_months_ahead months after it, and
-- a partition for every month that has rows in the table's default partition (which catches rows
-- of months not made yet), moving those rows into it. A new partition takes its parent's
-- per-column statistics targets, and attempt's fillfactor. It takes each parent's lock for a moment
-- only when a partition is missing (lock_timeout bounds the wait; a month not made now is made on
-- the next call, its rows wait in the default partition meanwhile). Called by the retention job
-- (scheduler role) at start and periodically, and once when this file is applied. Returns the
-- partitions made.

create or replace function ordo_partitions_ensure(p_months_ahead integer default 3)
  returns text[]
  language plpgsql
  security definer
  set search_path = pg_catalog, public
  as $$
declare
  v_tab record;
  v_month timestamptz;
  v_name text;
  v_made text[] := '{}';
  v_moving boolean;
  v_att record;
  v_now_month timestamptz := date_trunc('month', now() at time zone 'UTC') at time zone 'UTC';
begin
  if p_months_ahead is null or p_months_ahead < 0 or p_months_ahead > 120 then
    raise exception 'months ahead must be 0 to 120' using errcode = 'invalid_parameter_value';
  end if;
  perform set_config('lock_timeout', '2s', true);
  for v_tab in
    select * from (values ('run_event', 'created_at', ''), ('attempt', 'created_at', ' with (fillfactor = 70)'),
      ('span', 'started_at', '')) as t(tbl, col, opts)
  loop
    -- (A table not partitioned, as before db/migrations/022_partitions.sql, has no months to make.)
    continue when (select c.relkind from pg_class c where c.oid = to_regclass('public.' || v_tab.tbl)) is distinct from 'p';
    for v_month in
      select m from generate_series(v_now_month, v_now_month + make_interval(months => p_months_ahead),
        interval '1 month') as g(m)
      union
      select m from ordo_partitions_default_months(v_tab.tbl, v_tab.col) as d(m)
      order by 1
    loop
      v_name := v_tab.tbl || '_p' || to_char(v_month at time zone 'UTC', 'YYYY_MM');
      continue when to_regclass('public.' || v_name) is not null;
      execute format('select exists (select 1 from public.%I where %I >= $1 and %I < $2)',
        v_tab.tbl || '_default', v_tab.col, v_tab.col)
        into v_moving using v_month, v_month + interval '1 month';
      if v_moving then
        -- The month's rows leave the default partition for the new one, which is attached after
        -- (a partition cannot be made for a range the default partition holds rows of).
        execute format('create table public.%I (like public.%I including defaults including constraints)%s',
          v_name, v_tab.tbl, v_tab.opts);
        execute format('with moved as (delete from public.%I where %I >= $1 and %I < $2 returning *)
          insert into public.%I select * from moved', v_tab.tbl || '_default', v_tab.col, v_tab.col, v_name)
          using v_month, v_month + interval '1 month';
        execute format('alter table public.%I attach partition public.%I for values from (%L) to (%L)',
          v_tab.tbl, v_name, v_month, v_month + interval '1 month');
      else
        execute format('create table public.%I partition of public.%I for values from (%L) to (%L)%s',
          v_name, v_tab.tbl, v_month, v_month + interval '1 month', v_tab.opts);
      end if;
      for v_att in
        select a.attname, a.attstattarget from pg_attribute a
        where a.attrelid = ('public.' || v_tab.tbl)::regclass and a.attnum > 0 and not a.attisdropped
          and a.attstattarget >= 0
      loop
        execute format('alter table public.%I alter column %I set statistics %s', v_name, v_att.attname,
          v_att.attstattarget);
      end loop;
      v_made := v_made || v_name;
    end loop;
  end loop;
  return v_made;
end
$$;

revoke all on function ordo_partitions_ensure(integer) from public;
grant all on function ordo_partitions_ensure(integer) to ordo_system;

select ordo_partitions_ensure(3);
