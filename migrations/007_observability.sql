-- Observability: a tenant-wide order over run events for the live stream (cursor + replay),
-- cross-replica wake-ups for the stream (NOTIFY), and stored spans for the NDJSON export.

-- stream_id orders a tenant's events across runs (the stream cursor). It comes from one sequence,
-- so it is unique, but transactions commit out of sequence order; stream_xid (the inserting
-- transaction) lets readers deliver an event only once every transaction that could still add a
-- smaller stream_id has ended (stream_xid < xmin of the current snapshot), so a cursor never
-- skips an event that commits later.
create sequence run_event_stream_id_seq as bigint;
alter table run_event
  add column stream_id bigint not null default nextval('run_event_stream_id_seq'),
  add column stream_xid xid8 not null default pg_current_xact_id();
alter sequence run_event_stream_id_seq owned by run_event.stream_id;
create unique index run_event_stream_idx on run_event (tenant_id, stream_id);
grant usage on sequence run_event_stream_id_seq to ordo_app, ordo_system;

-- One notification per inserting statement and tenant; the payload carries ids only
-- ("<tenant> <highest stream_id>"), readers fetch the events themselves under RLS.
create function run_event_notify() returns trigger
  language plpgsql
  as $$
begin
  perform pg_notify('ordo_run_event', i.tenant_id || ' ' || i.max_id)
  from (select tenant_id, max(stream_id) as max_id from inserted group by tenant_id) i;
  return null;
end
$$;
create trigger run_event_notify after insert on run_event
  referencing new table as inserted
  for each statement execute function run_event_notify();

-- Revocation reaches open stream connections on every replica without waiting for a poll.
create function api_token_revoked_notify() returns trigger
  language plpgsql
  as $$
begin
  if new.revoked_at is not null and old.revoked_at is null then
    perform pg_notify('ordo_token_revoked', new.tenant_id || ' ' || new.jti::text);
  end if;
  return null;
end
$$;
create trigger api_token_revoked_notify after update of revoked_at on api_token
  for each row execute function api_token_revoked_notify();

-- The export walks a tenant's runs in (startedUtc, dagId, runId) order, startedUtc being the
-- start time or, for a run that never started, its creation time.
create index run_export_idx on run (tenant_id, (coalesce(started_at, created_at)), dag_id, run_id);

-- Finished spans (OpenTelemetry) of tenant work, written in batches by the span store so the
-- export carries them. Append-only; keyed by start time so it can be partitioned like run_event.
create table span (
  tenant_id text not null,
  trace_id text not null check (trace_id ~ '^[0-9a-f]{32}$'),
  span_id text not null check (span_id ~ '^[0-9a-f]{16}$'),
  started_at timestamptz not null,
  parent_span_id text,
  name text not null,
  kind smallint not null,
  run_id uuid,
  step_id text,
  ended_at timestamptz not null,
  status_code smallint not null,
  status_message text,
  attributes jsonb not null,
  constraint span_pk primary key (tenant_id, trace_id, span_id, started_at)
);
create index span_run_idx on span (tenant_id, run_id, started_at, span_id);
alter table span enable row level security;
alter table span force row level security;
create policy tenant_isolation on span
  using (tenant_id = ordo_current_tenant()) with check (tenant_id = ordo_current_tenant());
grant select on span to ordo_app;
grant select, insert on span to ordo_system;
