-- The high-volume tables run_event, attempt and span are partitioned by RANGE on their time
-- column (run_event.created_at, attempt.created_at, span.started_at), one partition per calendar
-- month in UTC, so that retention retires a month by dropping its partitions. Each table keeps its
-- columns, keys (the time column was already in each primary key), checks, indexes, row-level
-- security (enabled and forced), grants and triggers. Every row lands in the table's default
-- partition here; ordo_partitions_ensure (db/functions/ordo_partitions_ensure.sql, applied after
-- the migrations) then makes the month partitions, moving each month's rows out of the default
-- partition, and keeps months ahead made.
--
-- artifact stays one table: an artifact is content-addressed per tenant and shared by every step
-- that produced the same bytes, in any month, and the engine reads it by (tenant_id, sha256) alone;
-- retention deletes the artifacts no step or attempt names any more.
--
-- The tables' triggers have their one home in function files (run_event_append_only,
-- run_event_notify, ordo_refuse_transition); their recorded checksums are forgotten at the end of
-- this migration, so the migrator applies those files again right after it and they make the
-- triggers on the new tables; likewise ordo_partitions_ensure.sql, whose application makes the
-- month partitions and moves the rows this migration put in the default partitions.
--
-- Partitions carry no grants: the application and system roles reach the rows through the parent
-- tables only, where row-level security applies.

-- run_event ------------------------------------------------------------------------------------

alter table run_event rename to run_event_unpartitioned;
alter index run_event_pk rename to run_event_unpartitioned_pk;
alter index run_event_stream_idx rename to run_event_unpartitioned_stream_idx;
alter sequence run_event_stream_id_seq owned by none;

create table run_event (
  tenant_id text not null,
  run_id uuid not null,
  seq integer not null,
  created_at timestamptz not null,
  type text not null,
  step_id text,
  attempt integer,
  actor text not null,
  data jsonb not null,
  prev_hash text not null,
  hash text not null,
  stream_id bigint not null default nextval('run_event_stream_id_seq'),
  stream_xid xid8 not null default pg_current_xact_id(),
  constraint run_event_pk primary key (tenant_id, run_id, seq, created_at),
  constraint run_event_hash_check check (octet_length(hash) = 64 and hash !~ '[^0-9a-f]'),
  constraint run_event_seq_positive check (seq >= 1)
) partition by range (created_at);
alter sequence run_event_stream_id_seq owned by run_event.stream_id;
-- stream_id comes from one sequence, so it is unique without a unique index (which a partitioned
-- table could only have with created_at in it).
create index run_event_stream_idx on run_event (tenant_id, stream_id);
create table run_event_default partition of run_event default;

insert into run_event (tenant_id, run_id, seq, created_at, type, step_id, attempt, actor, data, prev_hash, hash,
  stream_id, stream_xid)
select tenant_id, run_id, seq, created_at, type, step_id, attempt, actor, data, prev_hash, hash, stream_id, stream_xid
from run_event_unpartitioned;
drop table run_event_unpartitioned;

alter table run_event enable row level security;
alter table run_event force row level security;
create policy tenant_isolation on run_event using (tenant_id = ordo_current_tenant())
  with check (tenant_id = ordo_current_tenant());
grant select, insert on table run_event to ordo_app, ordo_system;

-- attempt --------------------------------------------------------------------------------------

alter table attempt rename to attempt_unpartitioned;
alter index attempt_pk rename to attempt_unpartitioned_pk;
alter index attempt_created_brin_idx rename to attempt_unpartitioned_created_brin_idx;

create table attempt (
  tenant_id text not null,
  run_id uuid not null,
  step_id text not null,
  attempt integer not null,
  created_at timestamptz not null default now(),
  epoch integer not null,
  worker_id text not null,
  status text not null default 'running',
  lease_expires_at timestamptz not null,
  traceparent text not null,
  queued_at timestamptz,
  claimed_at timestamptz not null,
  constraint_checked_at timestamptz,
  started_at timestamptz,
  finished_at timestamptz,
  terminated_at timestamptz,
  error jsonb,
  outputs_hash text,
  logs_hash text,
  condition_pending_at timestamptz,
  constraint attempt_pk primary key (tenant_id, run_id, step_id, attempt, created_at),
  constraint attempt_status_check check (status in ('running', 'succeeded', 'failed', 'orphaned', 'cancelled', 'skipped'))
) partition by range (created_at);
create index attempt_created_brin_idx on attempt using brin (created_at) with (autosummarize = on);
create table attempt_default partition of attempt default with (fillfactor = 70);

insert into attempt (tenant_id, run_id, step_id, attempt, created_at, epoch, worker_id, status, lease_expires_at,
  traceparent, queued_at, claimed_at, constraint_checked_at, started_at, finished_at, terminated_at, error,
  outputs_hash, logs_hash, condition_pending_at)
select tenant_id, run_id, step_id, attempt, created_at, epoch, worker_id, status, lease_expires_at,
  traceparent, queued_at, claimed_at, constraint_checked_at, started_at, finished_at, terminated_at, error,
  outputs_hash, logs_hash, condition_pending_at
from attempt_unpartitioned;
drop table attempt_unpartitioned;

alter table attempt enable row level security;
alter table attempt force row level security;
create policy tenant_isolation on attempt using (tenant_id = ordo_current_tenant())
  with check (tenant_id = ordo_current_tenant());
grant select, update on table attempt to ordo_app;
grant select, insert, update on table attempt to ordo_system;

-- span -----------------------------------------------------------------------------------------

alter table span rename to span_unpartitioned;
alter index span_pk rename to span_unpartitioned_pk;
alter index span_run_idx rename to span_unpartitioned_run_idx;

create table span (
  tenant_id text not null,
  trace_id text not null,
  span_id text not null,
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
  constraint span_pk primary key (tenant_id, trace_id, span_id, started_at),
  constraint span_span_id_check check (octet_length(span_id) = 16 and span_id !~ '[^0-9a-f]'),
  constraint span_trace_id_check check (octet_length(trace_id) = 32 and trace_id !~ '[^0-9a-f]')
) partition by range (started_at);
create index span_run_idx on span (tenant_id, run_id, started_at, span_id);
create table span_default partition of span default;

insert into span (tenant_id, trace_id, span_id, started_at, parent_span_id, name, kind, run_id, step_id, ended_at,
  status_code, status_message, attributes)
select tenant_id, trace_id, span_id, started_at, parent_span_id, name, kind, run_id, step_id, ended_at,
  status_code, status_message, attributes
from span_unpartitioned;
drop table span_unpartitioned;

alter table span enable row level security;
alter table span force row level security;
create policy tenant_isolation on span using (tenant_id = ordo_current_tenant())
  with check (tenant_id = ordo_current_tenant());
grant select on table span to ordo_app;
grant select, insert on table span to ordo_system;

-- Statistics targets as the baseline set them (001_baseline.sql), on the parents: a partition
-- takes its parent's (ordo_partitions_ensure copies them), since autovacuum analyzes partitions.
do $$
declare
  v record;
begin
  for v in
    select * from (values
      ('run_event', array['tenant_id', 'run_id', 'seq', 'type', 'stream_id'],
        array['created_at', 'step_id', 'attempt', 'actor', 'data', 'prev_hash', 'hash', 'stream_xid']),
      ('attempt', array['tenant_id', 'run_id', 'step_id', 'attempt', 'created_at', 'epoch', 'status'],
        array['worker_id', 'lease_expires_at', 'traceparent', 'queued_at', 'claimed_at', 'constraint_checked_at',
          'started_at', 'finished_at', 'terminated_at', 'error', 'outputs_hash', 'logs_hash', 'condition_pending_at']),
      ('span', array['tenant_id', 'trace_id', 'span_id', 'started_at', 'run_id'],
        array['parent_span_id', 'name', 'kind', 'step_id', 'ended_at', 'status_code', 'status_message', 'attributes'])
    ) as t(tbl, keys, rest)
  loop
    for i in 1 .. cardinality(v.keys) loop
      execute format('alter table %I alter column %I set statistics 10', v.tbl, v.keys[i]);
    end loop;
    for i in 1 .. cardinality(v.rest) loop
      execute format('alter table %I alter column %I set statistics 0', v.tbl, v.rest[i]);
    end loop;
  end loop;
end
$$;

-- Exports: one row per export that reached its manifest, with its range. A run counts as
-- exported when an export whose range holds it started after the run finished (it then read the
-- run in its final state); retention with ORDO_RETENTION_REQUIRES_EXPORT removes only those.
create table run_export (
  tenant_id text not null references tenant (id),
  export_id uuid not null default gen_random_uuid(),
  started_at timestamptz not null,
  finished_at timestamptz not null default now(),
  range_from timestamptz,
  range_to timestamptz,
  dag_id text,
  runs integer not null,
  constraint run_export_pk primary key (tenant_id, export_id)
);
create index run_export_started_idx on run_export (tenant_id, started_at);
alter table run_export enable row level security;
alter table run_export force row level security;
create policy tenant_isolation on run_export using (tenant_id = ordo_current_tenant())
  with check (tenant_id = ordo_current_tenant());
grant select, insert on table run_export to ordo_app;
grant select on table run_export to ordo_system;

-- What retention removed: runs deleted in batches (per tenant) and month partitions dropped (one
-- row per tenant that had rows in them). Written by the retention functions only.
create table retention_log (
  tenant_id text not null references tenant (id),
  id bigint generated always as identity,
  at timestamptz not null default now(),
  action text not null,
  detail jsonb not null,
  constraint retention_log_pk primary key (tenant_id, id),
  constraint retention_log_action_check check (action in ('runs_deleted', 'partition_dropped'))
);
create index retention_log_at_idx on retention_log (tenant_id, at);
alter table retention_log enable row level security;
alter table retention_log force row level security;
create policy tenant_isolation on retention_log using (tenant_id = ordo_current_tenant())
  with check (tenant_id = ordo_current_tenant());
grant select on table retention_log to ordo_app, ordo_system;

delete from ordo_function
where name in ('run_event_append_only', 'run_event_notify', 'ordo_refuse_transition', 'ordo_partitions_ensure');
