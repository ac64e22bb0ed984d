-- A notification: sent at once, or, in a transaction that asked for it (ordo.notify_after_commit),
-- kept for the caller to send after the commit (ordo_take_notifications), so that a worker woken by
-- it never finds the change still uncommitted. Each call appends one element: collecting n
-- notifications costs time linear in n.

create or replace function ordo_notify(p_channel text, p_payload text) returns void
  language plpgsql
  as $$
declare
  v_kept text;
begin
  if current_setting('ordo.notify_after_commit', true) = 'on' then
    v_kept := current_setting('ordo.notifications', true);
    perform set_config('ordo.notifications',
      case when v_kept is null or v_kept = '' then '' else v_kept || ',' end
        || jsonb_build_array(p_channel, p_payload)::text,
      true);
  else
    perform pg_notify(p_channel, p_payload);
  end if;
end
$$;

grant all on function ordo_notify(p_channel text, p_payload text) to ordo_app;
grant all on function ordo_notify(p_channel text, p_payload text) to ordo_system;
