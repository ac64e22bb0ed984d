-- The notifications kept so far in this transaction (each once, in order of first mention), and
-- notifications sent at once again from here on.

create or replace function ordo_take_notifications() returns setof jsonb
  language plpgsql
  as $$
declare
  v jsonb := ('[' || coalesce(current_setting('ordo.notifications', true), '') || ']')::jsonb;
begin
  perform set_config('ordo.notifications', '', true);
  perform set_config('ordo.notify_after_commit', 'off', true);
  return query
    select x.n from jsonb_array_elements(v) with ordinality as x(n, k)
    group by x.n order by min(x.k);
end
$$;

grant all on function ordo_take_notifications() to ordo_system;
