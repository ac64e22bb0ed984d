-- Changes made through the API wake every scheduler process (payload: tenant id). The scheduler's
-- own bookkeeping (next_fire_at, queued_fire_at, last_*) does not notify.

create or replace function schedule_notify() returns trigger
  language plpgsql
  as $$
begin
  perform pg_notify('ordo_schedule_changed', coalesce(new.tenant_id, old.tenant_id));
  return null;
end
$$;

create or replace trigger schedule_notify
  after insert or delete or update of dag_id, dag_version, cron, timezone, inputs, catch_up, overlap, paused
  on schedule for each row execute function schedule_notify();
