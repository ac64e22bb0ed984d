-- The baseline of Ordo's schema: its tables with their constraints, indexes, row-level security
-- policies and grants, one table after another, the composite types the engine's functions take,
-- and the allowed status changes. Every tenant-owned table leads its keys with tenant_id and has
-- row-level security enabled and forced, keyed on app.tenant_id (ordo_current_tenant below).
--
-- SQL functions, trigger functions and their triggers live in db/functions/, one file each, applied
-- after the numbered migrations; db/schema.sql is the whole current schema, generated. Numbered
-- migrations after this one change tables, indexes, policies and data only.

-- The tenant a transaction is bound to (set_config('app.tenant_id', ..., true)); null outside one.
-- Defined here rather than in db/functions/: every policy below reads it.
create function ordo_current_tenant() returns text
  language sql stable parallel safe
  as $$ select nullif(current_setting('app.tenant_id', true), '') $$;
grant all on function ordo_current_tenant() to ordo_app, ordo_system;

CREATE TYPE ordo_adv_chained AS (
	tenant_id text,
	run_id uuid,
	seq integer,
	type text,
	step_id text,
	attempt integer,
	actor text,
	data text,
	prev_hash text,
	hash text
);
CREATE TYPE ordo_adv_ending AS (
	tenant_id text,
	run_id uuid,
	dag_id text,
	type text
);
CREATE TYPE ordo_adv_event AS (
	tenant_id text,
	run_id uuid,
	ord integer,
	type text,
	step_id text,
	attempt integer,
	actor text,
	data text
);
CREATE TYPE ordo_adv_ready AS (
	tenant_id text,
	run_id uuid,
	step_id text,
	topo_index integer,
	claim boolean
);
CREATE TYPE ordo_adv_result AS (
	tenant_id text,
	run_id uuid,
	step_id text,
	attempt integer,
	epoch integer,
	outputs jsonb,
	outputs_hash text,
	logs_hash text,
	started_at timestamp with time zone,
	finished_at timestamp with time zone,
	ord integer
);
CREATE TYPE ordo_claim_item AS (
	tenant_id text,
	id bigint,
	run_id uuid,
	step_id text,
	enqueued_at timestamp with time zone,
	rk integer
);
CREATE TYPE ordo_run_key AS (
	tenant_id text,
	run_id uuid
);

CREATE TABLE tenant (
    id text NOT NULL,
    name text NOT NULL,
    status text DEFAULT 'active'::text NOT NULL,
    settings jsonb DEFAULT '{}'::jsonb NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    disabled_at timestamp with time zone,
    CONSTRAINT tenant_id_format CHECK ((id ~ '^[a-z0-9][a-z0-9-]{0,62}$'::text)),
    CONSTRAINT tenant_status_check CHECK ((status = ANY (ARRAY['active'::text, 'disabled'::text])))
);

ALTER TABLE ONLY tenant FORCE ROW LEVEL SECURITY;
ALTER TABLE ONLY tenant
    ADD CONSTRAINT tenant_pk PRIMARY KEY (id);
ALTER TABLE tenant ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON tenant USING ((id = ordo_current_tenant())) WITH CHECK ((id = ordo_current_tenant()));
GRANT SELECT ON TABLE tenant TO ordo_app;
GRANT SELECT,INSERT,UPDATE ON TABLE tenant TO ordo_system;
GRANT UPDATE(settings) ON TABLE tenant TO ordo_app;

-- Tokens minted for a tenant. The JWT itself is never stored; jti identifies it for revocation.
CREATE TABLE api_token (
    tenant_id text NOT NULL,
    jti uuid NOT NULL,
    subject text NOT NULL,
    scopes text[] NOT NULL,
    description text,
    created_by text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    expires_at timestamp with time zone NOT NULL,
    revoked_at timestamp with time zone,
    revoked_by text
);

ALTER TABLE ONLY api_token FORCE ROW LEVEL SECURITY;
ALTER TABLE ONLY api_token
    ADD CONSTRAINT api_token_pk PRIMARY KEY (tenant_id, jti);
ALTER TABLE ONLY api_token
    ADD CONSTRAINT api_token_tenant_id_fkey FOREIGN KEY (tenant_id) REFERENCES tenant(id);
CREATE INDEX api_token_tenant_created_idx ON api_token USING btree (tenant_id, created_at DESC, jti);
ALTER TABLE api_token ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON api_token USING ((tenant_id = ordo_current_tenant())) WITH CHECK ((tenant_id = ordo_current_tenant()));
GRANT SELECT,INSERT,UPDATE ON TABLE api_token TO ordo_app;
GRANT SELECT,INSERT,UPDATE ON TABLE api_token TO ordo_system;

-- Platform operator tokens (scope platform:admin) belong to no tenant.
CREATE TABLE platform_token (
    jti uuid NOT NULL,
    subject text NOT NULL,
    description text,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    expires_at timestamp with time zone NOT NULL,
    revoked_at timestamp with time zone
);
ALTER TABLE ONLY platform_token
    ADD CONSTRAINT platform_token_pk PRIMARY KEY (jti);
GRANT SELECT,INSERT,UPDATE ON TABLE platform_token TO ordo_system;

-- Idempotency-Key records (IETF draft semantics), per tenant.
CREATE TABLE idempotency_key (
    tenant_id text NOT NULL,
    key text NOT NULL,
    method text NOT NULL,
    path text NOT NULL,
    request_hash text NOT NULL,
    state text NOT NULL,
    response_status integer,
    response_body jsonb,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    expires_at timestamp with time zone NOT NULL,
    CONSTRAINT idempotency_key_state_check CHECK ((state = ANY (ARRAY['processing'::text, 'done'::text])))
);

ALTER TABLE ONLY idempotency_key FORCE ROW LEVEL SECURITY;
ALTER TABLE ONLY idempotency_key
    ADD CONSTRAINT idempotency_key_pk PRIMARY KEY (tenant_id, key);
ALTER TABLE ONLY idempotency_key
    ADD CONSTRAINT idempotency_key_tenant_id_fkey FOREIGN KEY (tenant_id) REFERENCES tenant(id);
CREATE INDEX idempotency_key_expiry_idx ON idempotency_key USING btree (expires_at);
ALTER TABLE idempotency_key ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON idempotency_key USING ((tenant_id = ordo_current_tenant())) WITH CHECK ((tenant_id = ordo_current_tenant()));
GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE idempotency_key TO ordo_app;
GRANT SELECT,DELETE ON TABLE idempotency_key TO ordo_system;

-- DAGs and their immutable versions.
-- A version's content never changes once inserted: the application roles may only insert it and
-- flip its status (column grants), a trigger refuses any other UPDATE even from the owner, and no
-- role is granted DELETE. Rollback is publishing again or re-enabling an older version.
CREATE TABLE dag (
    tenant_id text NOT NULL,
    dag_id text NOT NULL,
    latest_version integer NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT dag_latest_version_positive CHECK ((latest_version >= 0))
);

ALTER TABLE ONLY dag FORCE ROW LEVEL SECURITY;
ALTER TABLE ONLY dag
    ADD CONSTRAINT dag_pk PRIMARY KEY (tenant_id, dag_id);
ALTER TABLE ONLY dag
    ADD CONSTRAINT dag_tenant_id_fkey FOREIGN KEY (tenant_id) REFERENCES tenant(id);
ALTER TABLE dag ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON dag USING ((tenant_id = ordo_current_tenant())) WITH CHECK ((tenant_id = ordo_current_tenant()));
GRANT SELECT,INSERT ON TABLE dag TO ordo_app;
GRANT SELECT,INSERT ON TABLE dag TO ordo_system;
GRANT UPDATE(latest_version) ON TABLE dag TO ordo_app;
GRANT UPDATE(latest_version) ON TABLE dag TO ordo_system;

CREATE TABLE dag_version (
    tenant_id text NOT NULL,
    dag_id text NOT NULL,
    version integer NOT NULL,
    content_hash text NOT NULL,
    definition jsonb NOT NULL,
    source_format text NOT NULL,
    status text DEFAULT 'active'::text NOT NULL,
    owner text NOT NULL,
    signature jsonb,
    bundle_hash text,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    disabled_at timestamp with time zone,
    CONSTRAINT dag_version_disabled_at CHECK (((status = 'disabled'::text) = (disabled_at IS NOT NULL))),
    CONSTRAINT dag_version_hash_format CHECK (((octet_length(content_hash) = 64) AND (content_hash !~ '[^0-9a-f]'::text))),
    CONSTRAINT dag_version_positive CHECK ((version >= 1)),
    CONSTRAINT dag_version_source_format_check CHECK ((source_format = ANY (ARRAY['json'::text, 'yaml'::text]))),
    CONSTRAINT dag_version_status_check CHECK ((status = ANY (ARRAY['active'::text, 'disabled'::text])))
);

ALTER TABLE ONLY dag_version FORCE ROW LEVEL SECURITY;
ALTER TABLE ONLY dag_version
    ADD CONSTRAINT dag_version_pk PRIMARY KEY (tenant_id, dag_id, version);
ALTER TABLE ONLY dag_version
    ADD CONSTRAINT dag_version_content_uq UNIQUE (tenant_id, dag_id, content_hash);
ALTER TABLE ONLY dag_version
    ADD CONSTRAINT dag_version_dag_fk FOREIGN KEY (tenant_id, dag_id) REFERENCES dag(tenant_id, dag_id);
CREATE INDEX dag_version_list_idx ON dag_version USING btree (tenant_id, dag_id, version DESC);
ALTER TABLE dag_version ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON dag_version USING ((tenant_id = ordo_current_tenant())) WITH CHECK ((tenant_id = ordo_current_tenant()));
GRANT SELECT,INSERT ON TABLE dag_version TO ordo_app;
GRANT SELECT,INSERT ON TABLE dag_version TO ordo_system;
GRANT UPDATE(status) ON TABLE dag_version TO ordo_app;
GRANT UPDATE(status) ON TABLE dag_version TO ordo_system;
GRANT UPDATE(disabled_at) ON TABLE dag_version TO ordo_app;
GRANT UPDATE(disabled_at) ON TABLE dag_version TO ordo_system;

-- Who disabled or re-enabled a version, and when. Append-only: one row per actual status change.
CREATE TABLE dag_version_status_change (
    tenant_id text NOT NULL,
    dag_id text NOT NULL,
    version integer NOT NULL,
    changed_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    status text NOT NULL,
    actor text NOT NULL,
    CONSTRAINT dag_version_status_change_status_check CHECK ((status = ANY (ARRAY['active'::text, 'disabled'::text])))
);

ALTER TABLE ONLY dag_version_status_change FORCE ROW LEVEL SECURITY;
ALTER TABLE ONLY dag_version_status_change
    ADD CONSTRAINT dag_version_status_change_pk PRIMARY KEY (tenant_id, dag_id, version, changed_at);
ALTER TABLE ONLY dag_version_status_change
    ADD CONSTRAINT dag_version_status_change_version_fk FOREIGN KEY (tenant_id, dag_id, version) REFERENCES dag_version(tenant_id, dag_id, version);
ALTER TABLE dag_version_status_change ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON dag_version_status_change USING ((tenant_id = ordo_current_tenant())) WITH CHECK ((tenant_id = ordo_current_tenant()));
GRANT SELECT,INSERT ON TABLE dag_version_status_change TO ordo_app;
GRANT SELECT,INSERT ON TABLE dag_version_status_change TO ordo_system;

-- Runs and their execution: run, step, attempt, run_event (append-only, hash-chained), the
-- per-tenant ready queue (queue_item + tenant_queue), artifacts (content-addressed outputs and
-- logs) and each tenant's webhook signing secret.
--
-- High-volume tables (attempt, run_event, artifact) carry a creation-time column in their primary
-- key and reference other tables by value only (no foreign keys), so they can be turned into
-- tables partitioned by range of that column and retired by dropping old partitions after an
-- export. The hot queue (queue_item) only holds work that is ready or leased: finished work leaves it.
-- Allowed state transitions. The same table exists in the code
-- (src/modules/runs/state-machine.ts, checked equal by a test); the triggers below refuse any
-- status change not listed here, whatever role writes it.
CREATE TABLE state_transition (
    entity text NOT NULL,
    from_state text NOT NULL,
    to_state text NOT NULL,
    CONSTRAINT state_transition_entity_check CHECK ((entity = ANY (ARRAY['run'::text, 'step'::text, 'attempt'::text])))
);
ALTER TABLE ONLY state_transition
    ADD CONSTRAINT state_transition_pk PRIMARY KEY (entity, from_state, to_state);
GRANT SELECT ON TABLE state_transition TO ordo_app;
GRANT SELECT ON TABLE state_transition TO ordo_system;
-- The allowed status changes of runs, steps and attempts (checked by the transition triggers, db/functions/ordo_refuse_transition.sql).
INSERT INTO state_transition (entity, from_state, to_state) VALUES
('attempt', 'running', 'cancelled'),
  ('attempt', 'running', 'failed'),
  ('attempt', 'running', 'orphaned'),
  ('attempt', 'running', 'succeeded'),
  ('run', 'queued', 'cancelled'),
  ('run', 'queued', 'failed'),
  ('run', 'queued', 'running'),
  ('run', 'queued', 'succeeded'),
  ('run', 'running', 'cancelled'),
  ('run', 'running', 'failed'),
  ('run', 'running', 'succeeded'),
  ('step', 'orphaned', 'cancelled'),
  ('step', 'orphaned', 'failed'),
  ('step', 'orphaned', 'queued'),
  ('step', 'orphaned', 'retrying'),
  ('step', 'pending', 'cancelled'),
  ('step', 'pending', 'queued'),
  ('step', 'pending', 'skipped'),
  ('step', 'queued', 'cancelled'),
  ('step', 'queued', 'failed'),
  ('step', 'queued', 'running'),
  ('step', 'queued', 'skipped'),
  ('step', 'retrying', 'cancelled'),
  ('step', 'retrying', 'queued'),
  ('step', 'running', 'cancelled'),
  ('step', 'running', 'failed'),
  ('step', 'running', 'orphaned'),
  ('step', 'running', 'retrying'),
  ('step', 'running', 'succeeded');

CREATE TABLE run (
    tenant_id text NOT NULL,
    run_id uuid NOT NULL,
    dag_id text NOT NULL,
    dag_version integer NOT NULL,
    content_hash text NOT NULL,
    run_token text NOT NULL,
    inputs jsonb NOT NULL,
    inputs_hash text NOT NULL,
    status text DEFAULT 'queued'::text NOT NULL,
    reason text,
    trace_id text NOT NULL,
    requested_by text NOT NULL,
    replay_of uuid,
    rerun_of uuid,
    rerun_from_step text,
    admitted boolean DEFAULT true NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    started_at timestamp with time zone,
    finished_at timestamp with time zone,
    steps_total integer NOT NULL,
    steps_remaining integer NOT NULL,
    steps_failed integer DEFAULT 0 NOT NULL,
    dispatch_count integer DEFAULT 0 NOT NULL,
    event_seq integer DEFAULT 0 NOT NULL,
    event_hash text DEFAULT ''::text NOT NULL,
    outputs_hash text,
    CONSTRAINT run_inputs_hash_format CHECK (((octet_length(inputs_hash) = 64) AND (inputs_hash !~ '[^0-9a-f]'::text))),
    CONSTRAINT run_status_check CHECK ((status = ANY (ARRAY['queued'::text, 'running'::text, 'succeeded'::text, 'failed'::text, 'cancelled'::text]))),
    CONSTRAINT run_trace_id_check CHECK (((octet_length(trace_id) = 32) AND (trace_id !~ '[^0-9a-f]'::text)))
)
WITH (fillfactor='70');

ALTER TABLE ONLY run FORCE ROW LEVEL SECURITY;
ALTER TABLE ONLY run
    ADD CONSTRAINT run_pk PRIMARY KEY (tenant_id, run_id);
ALTER TABLE ONLY run
    ADD CONSTRAINT run_token_uq UNIQUE (tenant_id, dag_id, run_token);
ALTER TABLE ONLY run
    ADD CONSTRAINT run_tenant_id_fkey FOREIGN KEY (tenant_id) REFERENCES tenant(id);
CREATE INDEX run_list_idx ON run USING btree (tenant_id, created_at DESC, run_id DESC);
CREATE INDEX run_dag_list_idx ON run USING btree (tenant_id, dag_id, created_at DESC, run_id DESC);
CREATE INDEX run_dag_active_idx ON run USING btree (tenant_id, dag_id, created_at) WHERE (status = ANY (ARRAY['queued'::text, 'running'::text]));
CREATE INDEX run_export_idx ON run USING btree (tenant_id, COALESCE(started_at, created_at), dag_id, run_id);
CREATE INDEX run_waiting_idx ON run USING btree (tenant_id, dag_id, created_at, run_id) WHERE ((status = 'queued'::text) AND (NOT admitted));
ALTER TABLE run ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON run USING ((tenant_id = ordo_current_tenant())) WITH CHECK ((tenant_id = ordo_current_tenant()));
GRANT SELECT,INSERT,UPDATE ON TABLE run TO ordo_app;
GRANT SELECT,INSERT,UPDATE ON TABLE run TO ordo_system;

CREATE TABLE step (
    tenant_id text NOT NULL,
    run_id uuid NOT NULL,
    step_id text NOT NULL,
    status text NOT NULL,
    reason text,
    plugin text NOT NULL,
    config jsonb NOT NULL,
    spec jsonb NOT NULL,
    depends_on text[] NOT NULL,
    topo_index integer NOT NULL,
    pending_deps integer NOT NULL,
    dispatch_seq integer,
    attempts integer DEFAULT 0 NOT NULL,
    epoch integer DEFAULT 0 NOT NULL,
    outputs jsonb,
    outputs_hash text,
    logs_hash text,
    error jsonb,
    from_rerun boolean DEFAULT false NOT NULL,
    queued_at timestamp with time zone,
    started_at timestamp with time zone,
    finished_at timestamp with time zone,
    CONSTRAINT step_status_check CHECK ((status = ANY (ARRAY['pending'::text, 'queued'::text, 'running'::text, 'succeeded'::text, 'failed'::text, 'skipped'::text, 'cancelled'::text, 'retrying'::text, 'orphaned'::text])))
)
WITH (fillfactor='70');

ALTER TABLE ONLY step FORCE ROW LEVEL SECURITY;
ALTER TABLE ONLY step
    ADD CONSTRAINT step_pk PRIMARY KEY (tenant_id, run_id, step_id);
ALTER TABLE step ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON step USING ((tenant_id = ordo_current_tenant())) WITH CHECK ((tenant_id = ordo_current_tenant()));
GRANT SELECT,INSERT,UPDATE ON TABLE step TO ordo_app;
GRANT SELECT,INSERT,UPDATE ON TABLE step TO ordo_system;

-- One row per attempt of a step. Phase timings: queued (ready), claimed (lease taken),
-- constraint_checked (pre-execution constraints passed), started (plugin called), finished
-- (plugin returned), terminated (result applied or the attempt was orphaned/cancelled).
CREATE TABLE attempt (
    tenant_id text NOT NULL,
    run_id uuid NOT NULL,
    step_id text NOT NULL,
    attempt integer NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    epoch integer NOT NULL,
    worker_id text NOT NULL,
    status text DEFAULT 'running'::text NOT NULL,
    lease_expires_at timestamp with time zone NOT NULL,
    traceparent text NOT NULL,
    queued_at timestamp with time zone,
    claimed_at timestamp with time zone NOT NULL,
    constraint_checked_at timestamp with time zone,
    started_at timestamp with time zone,
    finished_at timestamp with time zone,
    terminated_at timestamp with time zone,
    error jsonb,
    outputs_hash text,
    logs_hash text,
    CONSTRAINT attempt_status_check CHECK ((status = ANY (ARRAY['running'::text, 'succeeded'::text, 'failed'::text, 'orphaned'::text, 'cancelled'::text])))
)
WITH (fillfactor='70');

ALTER TABLE ONLY attempt FORCE ROW LEVEL SECURITY;
ALTER TABLE ONLY attempt
    ADD CONSTRAINT attempt_pk PRIMARY KEY (tenant_id, run_id, step_id, attempt, created_at);
ALTER TABLE attempt ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON attempt USING ((tenant_id = ordo_current_tenant())) WITH CHECK ((tenant_id = ordo_current_tenant()));
GRANT SELECT ON TABLE attempt TO ordo_app;
GRANT SELECT,INSERT,UPDATE ON TABLE attempt TO ordo_system;

-- Append-only event log, numbered per run without gaps (seq comes from run.event_seq under the
-- run's row lock) and hash-chained per run: hash = sha256(prev_hash || canonical JSON of the event).
CREATE TABLE run_event (
    tenant_id text NOT NULL,
    run_id uuid NOT NULL,
    seq integer NOT NULL,
    created_at timestamp with time zone NOT NULL,
    type text NOT NULL,
    step_id text,
    attempt integer,
    actor text NOT NULL,
    data jsonb NOT NULL,
    prev_hash text NOT NULL,
    hash text NOT NULL,
    stream_id bigint NOT NULL,
    stream_xid xid8 DEFAULT pg_current_xact_id() NOT NULL,
    CONSTRAINT run_event_hash_check CHECK (((octet_length(hash) = 64) AND (hash !~ '[^0-9a-f]'::text))),
    CONSTRAINT run_event_seq_positive CHECK ((seq >= 1))
);

ALTER TABLE ONLY run_event FORCE ROW LEVEL SECURITY;
CREATE SEQUENCE run_event_stream_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;
ALTER SEQUENCE run_event_stream_id_seq OWNED BY run_event.stream_id;
ALTER TABLE ONLY run_event ALTER COLUMN stream_id SET DEFAULT nextval('run_event_stream_id_seq'::regclass);
ALTER TABLE ONLY run_event
    ADD CONSTRAINT run_event_pk PRIMARY KEY (tenant_id, run_id, seq, created_at);
CREATE UNIQUE INDEX run_event_stream_idx ON run_event USING btree (tenant_id, stream_id);
ALTER TABLE run_event ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON run_event USING ((tenant_id = ordo_current_tenant())) WITH CHECK ((tenant_id = ordo_current_tenant()));
GRANT SELECT,INSERT ON TABLE run_event TO ordo_app;
GRANT SELECT,INSERT ON TABLE run_event TO ordo_system;
GRANT USAGE ON SEQUENCE run_event_stream_id_seq TO ordo_app;
GRANT USAGE ON SEQUENCE run_event_stream_id_seq TO ordo_system;

-- The per-tenant ready queue: one row per step that is ready (waiting for a worker) or leased
-- (a worker runs it; lease_expires_at is extended by heartbeats). Completion deletes the row.
CREATE TABLE queue_item (
    tenant_id text NOT NULL,
    id bigint NOT NULL,
    run_id uuid NOT NULL,
    step_id text NOT NULL,
    state text DEFAULT 'ready'::text NOT NULL,
    worker_id text,
    epoch integer,
    lease_expires_at timestamp with time zone,
    enqueued_at timestamp with time zone DEFAULT now() NOT NULL,
    gate text,
    gate_limit integer,
    CONSTRAINT queue_item_gate_limit CHECK ((((gate IS NULL) = (gate_limit IS NULL)) AND (COALESCE(gate_limit, 1) >= 1))),
    CONSTRAINT queue_item_lease_epoch CHECK (((state = 'leased'::text) = (epoch IS NOT NULL))),
    CONSTRAINT queue_item_state_check CHECK ((state = ANY (ARRAY['ready'::text, 'leased'::text])))
);

ALTER TABLE ONLY queue_item FORCE ROW LEVEL SECURITY;
ALTER TABLE queue_item ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME queue_item_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);
ALTER TABLE ONLY queue_item
    ADD CONSTRAINT queue_item_pk PRIMARY KEY (tenant_id, id);
ALTER TABLE ONLY queue_item
    ADD CONSTRAINT queue_item_step_uq UNIQUE (tenant_id, run_id, step_id);
CREATE INDEX queue_item_ready_idx ON queue_item USING btree (tenant_id, id) WHERE (state = 'ready'::text);
CREATE INDEX queue_item_lease_idx ON queue_item USING btree (lease_expires_at) WHERE (state = 'leased'::text);
CREATE INDEX queue_item_gate_idx ON queue_item USING btree (tenant_id, gate, state) WHERE (gate IS NOT NULL);
CREATE INDEX queue_item_ungated_ready_idx ON queue_item USING btree (tenant_id, id) WHERE ((state = 'ready'::text) AND (gate IS NULL));
CREATE INDEX queue_item_gated_ready_idx ON queue_item USING btree (tenant_id, gate, gate_limit, id) WHERE ((state = 'ready'::text) AND (gate IS NOT NULL));
CREATE INDEX queue_item_leased_idx ON queue_item USING btree (tenant_id, gate) WHERE (state = 'leased'::text);
ALTER TABLE queue_item ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON queue_item USING ((tenant_id = ordo_current_tenant())) WITH CHECK ((tenant_id = ordo_current_tenant()));
GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE queue_item TO ordo_app;
GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE queue_item TO ordo_system;

-- Per-tenant queue state for fair claiming: steps in flight (capped), weight, last service time.
CREATE TABLE tenant_queue (
    tenant_id text NOT NULL,
    weight integer DEFAULT 1 NOT NULL,
    served_at timestamp with time zone DEFAULT '-infinity'::timestamp with time zone NOT NULL,
    CONSTRAINT tenant_queue_weight_check CHECK (((weight >= 1) AND (weight <= 1000)))
)
WITH (fillfactor='50');

ALTER TABLE ONLY tenant_queue FORCE ROW LEVEL SECURITY;
ALTER TABLE ONLY tenant_queue
    ADD CONSTRAINT tenant_queue_pk PRIMARY KEY (tenant_id);
ALTER TABLE ONLY tenant_queue
    ADD CONSTRAINT tenant_queue_tenant_id_fkey FOREIGN KEY (tenant_id) REFERENCES tenant(id);
ALTER TABLE tenant_queue ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON tenant_queue USING ((tenant_id = ordo_current_tenant())) WITH CHECK ((tenant_id = ordo_current_tenant()));
GRANT SELECT,INSERT ON TABLE tenant_queue TO ordo_app;
GRANT SELECT,INSERT,UPDATE ON TABLE tenant_queue TO ordo_system;

-- Content-addressed blobs (step outputs, logs), per tenant. Deduplicated per creation day, so the
-- key carries the day and the table can be partitioned by it.
CREATE TABLE artifact (
    tenant_id text NOT NULL,
    sha256 text NOT NULL,
    created_on date DEFAULT CURRENT_DATE NOT NULL,
    media_type text NOT NULL,
    size integer NOT NULL,
    body_json jsonb,
    body_bytes bytea,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT artifact_one_body CHECK (((body_json IS NULL) <> (body_bytes IS NULL))),
    CONSTRAINT artifact_sha256_check CHECK (((octet_length(sha256) = 64) AND (sha256 !~ '[^0-9a-f]'::text)))
);

ALTER TABLE ONLY artifact FORCE ROW LEVEL SECURITY;
ALTER TABLE ONLY artifact
    ADD CONSTRAINT artifact_pk PRIMARY KEY (tenant_id, sha256, created_on);
ALTER TABLE artifact ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON artifact USING ((tenant_id = ordo_current_tenant())) WITH CHECK ((tenant_id = ordo_current_tenant()));
GRANT SELECT,INSERT ON TABLE artifact TO ordo_app;
GRANT SELECT,INSERT ON TABLE artifact TO ordo_system;

-- Per-tenant secret signing outgoing constraint webhooks (HMAC-SHA256); created on first use.
CREATE TABLE tenant_webhook_secret (
    tenant_id text NOT NULL,
    secret text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL
);

ALTER TABLE ONLY tenant_webhook_secret FORCE ROW LEVEL SECURITY;
ALTER TABLE ONLY tenant_webhook_secret
    ADD CONSTRAINT tenant_webhook_secret_pk PRIMARY KEY (tenant_id);
ALTER TABLE ONLY tenant_webhook_secret
    ADD CONSTRAINT tenant_webhook_secret_tenant_id_fkey FOREIGN KEY (tenant_id) REFERENCES tenant(id);
ALTER TABLE tenant_webhook_secret ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON tenant_webhook_secret USING ((tenant_id = ordo_current_tenant())) WITH CHECK ((tenant_id = ordo_current_tenant()));
GRANT SELECT,INSERT ON TABLE tenant_webhook_secret TO ordo_system;

-- Tenant secrets, referenced from step configs as ${{ secrets.NAME }}.
-- Values are stored only encrypted (AES-256-GCM). The key lives in a 0600 file beside the instance
-- signing keys, never in the database; key_id names the key that sealed each row, so keys can be
-- rotated. The GCM additional data binds a ciphertext to its tenant and name: a row copied to
-- another tenant or name does not decrypt.
CREATE TABLE secret (
    tenant_id text NOT NULL,
    name text NOT NULL,
    key_id text NOT NULL,
    nonce bytea NOT NULL,
    ciphertext bytea NOT NULL,
    created_by text NOT NULL,
    updated_by text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT secret_name_format CHECK ((name ~ '^[A-Za-z_][A-Za-z0-9_-]{0,127}$'::text)),
    CONSTRAINT secret_nonce_size CHECK ((octet_length(nonce) = 12))
);

ALTER TABLE ONLY secret FORCE ROW LEVEL SECURITY;
ALTER TABLE ONLY secret
    ADD CONSTRAINT secret_pk PRIMARY KEY (tenant_id, name);
ALTER TABLE ONLY secret
    ADD CONSTRAINT secret_tenant_id_fkey FOREIGN KEY (tenant_id) REFERENCES tenant(id);
ALTER TABLE secret ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON secret USING ((tenant_id = ordo_current_tenant())) WITH CHECK ((tenant_id = ordo_current_tenant()));
GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE secret TO ordo_app;
GRANT SELECT ON TABLE secret TO ordo_system;

-- Trust store, signed offline bundles and the files they ship.
-- A bundle and its files never change once imported: no UPDATE or DELETE is granted on them.
-- A trusted key is never deleted either; revoking it sets revoked_at (kept for the audit trail).
-- Ed25519 public keys a tenant trusts to sign bundles and DAG versions.
CREATE TABLE trust_key (
    tenant_id text NOT NULL,
    kid text NOT NULL,
    owner text NOT NULL,
    public_jwk jsonb NOT NULL,
    created_by text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    expires_at timestamp with time zone,
    revoked_at timestamp with time zone,
    revoked_by text,
    CONSTRAINT trust_key_kid_format CHECK ((kid ~ '^[A-Za-z0-9._:-]{1,128}$'::text)),
    CONSTRAINT trust_key_public_only CHECK ((NOT (public_jwk ? 'd'::text))),
    CONSTRAINT trust_key_revoked CHECK (((revoked_at IS NULL) = (revoked_by IS NULL)))
);

ALTER TABLE ONLY trust_key FORCE ROW LEVEL SECURITY;
ALTER TABLE ONLY trust_key
    ADD CONSTRAINT trust_key_pk PRIMARY KEY (tenant_id, kid);
ALTER TABLE ONLY trust_key
    ADD CONSTRAINT trust_key_tenant_id_fkey FOREIGN KEY (tenant_id) REFERENCES tenant(id);
CREATE INDEX trust_key_tenant_created_idx ON trust_key USING btree (tenant_id, created_at DESC, kid);
ALTER TABLE trust_key ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON trust_key USING ((tenant_id = ordo_current_tenant())) WITH CHECK ((tenant_id = ordo_current_tenant()));
GRANT SELECT,INSERT ON TABLE trust_key TO ordo_app;
GRANT SELECT ON TABLE trust_key TO ordo_system;
GRANT UPDATE(revoked_at) ON TABLE trust_key TO ordo_app;
GRANT UPDATE(revoked_by) ON TABLE trust_key TO ordo_app;

--
-- PostgreSQL database dump complete
--

-- One imported bundle, identified by the SHA-256 of its manifest bytes.
CREATE TABLE bundle (
    tenant_id text NOT NULL,
    bundle_hash text NOT NULL,
    name text NOT NULL,
    version text NOT NULL,
    owner text NOT NULL,
    manifest jsonb NOT NULL,
    signature text NOT NULL,
    kid text NOT NULL,
    dags jsonb NOT NULL,
    imported_by text NOT NULL,
    imported_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT bundle_hash_format CHECK ((bundle_hash ~ '^[0-9a-f]{64}$'::text))
);

ALTER TABLE ONLY bundle FORCE ROW LEVEL SECURITY;
ALTER TABLE ONLY bundle
    ADD CONSTRAINT bundle_pk PRIMARY KEY (tenant_id, bundle_hash);
ALTER TABLE ONLY bundle
    ADD CONSTRAINT bundle_name_version_uq UNIQUE (tenant_id, name, version);
ALTER TABLE ONLY bundle
    ADD CONSTRAINT bundle_kid_fk FOREIGN KEY (tenant_id, kid) REFERENCES trust_key(tenant_id, kid);
ALTER TABLE ONLY bundle
    ADD CONSTRAINT bundle_tenant_id_fkey FOREIGN KEY (tenant_id) REFERENCES tenant(id);
CREATE INDEX bundle_tenant_imported_idx ON bundle USING btree (tenant_id, imported_at DESC, bundle_hash);
ALTER TABLE bundle ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON bundle USING ((tenant_id = ordo_current_tenant())) WITH CHECK ((tenant_id = ordo_current_tenant()));
GRANT SELECT,INSERT ON TABLE bundle TO ordo_app;
GRANT SELECT ON TABLE bundle TO ordo_system;

-- File contents, addressed by their SHA-256; shared by every bundle of the tenant that ships them.
CREATE TABLE bundle_blob (
    tenant_id text NOT NULL,
    sha256 text NOT NULL,
    size integer NOT NULL,
    content bytea NOT NULL,
    CONSTRAINT bundle_blob_hash_format CHECK ((sha256 ~ '^[0-9a-f]{64}$'::text)),
    CONSTRAINT bundle_blob_size CHECK ((size = octet_length(content)))
);

ALTER TABLE ONLY bundle_blob FORCE ROW LEVEL SECURITY;
ALTER TABLE ONLY bundle_blob
    ADD CONSTRAINT bundle_blob_pk PRIMARY KEY (tenant_id, sha256);
ALTER TABLE ONLY bundle_blob
    ADD CONSTRAINT bundle_blob_tenant_id_fkey FOREIGN KEY (tenant_id) REFERENCES tenant(id);
ALTER TABLE bundle_blob ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON bundle_blob USING ((tenant_id = ordo_current_tenant())) WITH CHECK ((tenant_id = ordo_current_tenant()));
GRANT SELECT,INSERT ON TABLE bundle_blob TO ordo_app;
GRANT SELECT ON TABLE bundle_blob TO ordo_system;

-- Every file a bundle ships, by its path inside the bundle.
CREATE TABLE bundle_file (
    tenant_id text NOT NULL,
    bundle_hash text NOT NULL,
    path text NOT NULL,
    kind text NOT NULL,
    sha256 text NOT NULL,
    size integer NOT NULL,
    CONSTRAINT bundle_file_kind_check CHECK ((kind = ANY (ARRAY['dag'::text, 'script'::text, 'file'::text])))
);

ALTER TABLE ONLY bundle_file FORCE ROW LEVEL SECURITY;
ALTER TABLE ONLY bundle_file
    ADD CONSTRAINT bundle_file_pk PRIMARY KEY (tenant_id, bundle_hash, path);
ALTER TABLE ONLY bundle_file
    ADD CONSTRAINT bundle_file_blob_fk FOREIGN KEY (tenant_id, sha256) REFERENCES bundle_blob(tenant_id, sha256);
ALTER TABLE ONLY bundle_file
    ADD CONSTRAINT bundle_file_bundle_fk FOREIGN KEY (tenant_id, bundle_hash) REFERENCES bundle(tenant_id, bundle_hash);
ALTER TABLE bundle_file ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON bundle_file USING ((tenant_id = ordo_current_tenant())) WITH CHECK ((tenant_id = ordo_current_tenant()));
GRANT SELECT,INSERT ON TABLE bundle_file TO ordo_app;
GRANT SELECT ON TABLE bundle_file TO ordo_system;

-- Cron schedules and the record of each fire time.
-- A schedule's due work is claimed by one scheduler process at a time (row lock, SKIP LOCKED);
-- schedule_fire's key (tenant_id, schedule_id, fire_time) records each fire time at most once,
-- and the run it created carries the deterministic token schedule:<id>:<fireTimeUtc>.
CREATE TABLE schedule (
    tenant_id text NOT NULL,
    id uuid NOT NULL,
    dag_id text NOT NULL,
    dag_version integer,
    cron text NOT NULL,
    timezone text NOT NULL,
    inputs jsonb DEFAULT '{}'::jsonb NOT NULL,
    catch_up text NOT NULL,
    overlap text NOT NULL,
    paused boolean DEFAULT false NOT NULL,
    next_fire_at timestamp with time zone,
    queued_fire_at timestamp with time zone,
    last_run_id uuid,
    last_fire_at timestamp with time zone,
    created_by text NOT NULL,
    created_at timestamp with time zone DEFAULT date_trunc('milliseconds'::text, now()) NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT schedule_catch_up_check CHECK ((catch_up = ANY (ARRAY['none'::text, 'latest'::text, 'all'::text]))),
    CONSTRAINT schedule_overlap_check CHECK ((overlap = ANY (ARRAY['allow'::text, 'skip'::text, 'queue'::text, 'cancel-previous'::text]))),
    CONSTRAINT schedule_version_positive CHECK (((dag_version IS NULL) OR (dag_version >= 1)))
);

ALTER TABLE ONLY schedule FORCE ROW LEVEL SECURITY;
ALTER TABLE ONLY schedule
    ADD CONSTRAINT schedule_pk PRIMARY KEY (tenant_id, id);
ALTER TABLE ONLY schedule
    ADD CONSTRAINT schedule_dag_fk FOREIGN KEY (tenant_id, dag_id) REFERENCES dag(tenant_id, dag_id);
ALTER TABLE ONLY schedule
    ADD CONSTRAINT schedule_tenant_id_fkey FOREIGN KEY (tenant_id) REFERENCES tenant(id);
CREATE INDEX schedule_list_idx ON schedule USING btree (tenant_id, created_at, id);
CREATE INDEX schedule_due_idx ON schedule USING btree (next_fire_at) WHERE (NOT paused);
CREATE INDEX schedule_queued_idx ON schedule USING btree (queued_fire_at) WHERE ((queued_fire_at IS NOT NULL) AND (NOT paused));
ALTER TABLE schedule ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON schedule USING ((tenant_id = ordo_current_tenant())) WITH CHECK ((tenant_id = ordo_current_tenant()));
GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE schedule TO ordo_app;
GRANT SELECT,UPDATE ON TABLE schedule TO ordo_system;

-- One row per handled fire time. outcome: created (run_id set; an already used run token yields
-- the same run), skipped (overlap = skip, or a later fire while one is queued), queued
-- (waiting for the previous run), cancelled-previous (the previous run was cancelled, run_id is
-- the new run), failed (the run could not be created: error says why).
CREATE TABLE schedule_fire (
    tenant_id text NOT NULL,
    schedule_id uuid NOT NULL,
    fire_time timestamp with time zone NOT NULL,
    run_id uuid,
    outcome text NOT NULL,
    error text,
    fired_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT schedule_fire_outcome_check CHECK ((outcome = ANY (ARRAY['created'::text, 'skipped'::text, 'queued'::text, 'cancelled-previous'::text, 'failed'::text])))
);

ALTER TABLE ONLY schedule_fire FORCE ROW LEVEL SECURITY;
ALTER TABLE ONLY schedule_fire
    ADD CONSTRAINT schedule_fire_pk PRIMARY KEY (tenant_id, schedule_id, fire_time);
ALTER TABLE ONLY schedule_fire
    ADD CONSTRAINT schedule_fire_schedule_fk FOREIGN KEY (tenant_id, schedule_id) REFERENCES schedule(tenant_id, id) ON DELETE CASCADE;
ALTER TABLE schedule_fire ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON schedule_fire USING ((tenant_id = ordo_current_tenant())) WITH CHECK ((tenant_id = ordo_current_tenant()));
GRANT SELECT ON TABLE schedule_fire TO ordo_app;
GRANT SELECT,INSERT ON TABLE schedule_fire TO ordo_system;
GRANT UPDATE(run_id) ON TABLE schedule_fire TO ordo_system;
GRANT UPDATE(outcome) ON TABLE schedule_fire TO ordo_system;
GRANT UPDATE(error) ON TABLE schedule_fire TO ordo_system;

-- Finished spans (OpenTelemetry) of tenant work, written in batches by the span store so the
-- export carries them. Append-only; keyed by start time so it can be partitioned like run_event.
CREATE TABLE span (
    tenant_id text NOT NULL,
    trace_id text NOT NULL,
    span_id text NOT NULL,
    started_at timestamp with time zone NOT NULL,
    parent_span_id text,
    name text NOT NULL,
    kind smallint NOT NULL,
    run_id uuid,
    step_id text,
    ended_at timestamp with time zone NOT NULL,
    status_code smallint NOT NULL,
    status_message text,
    attributes jsonb NOT NULL,
    CONSTRAINT span_span_id_check CHECK (((octet_length(span_id) = 16) AND (span_id !~ '[^0-9a-f]'::text))),
    CONSTRAINT span_trace_id_check CHECK (((octet_length(trace_id) = 32) AND (trace_id !~ '[^0-9a-f]'::text)))
);

ALTER TABLE ONLY span FORCE ROW LEVEL SECURITY;
ALTER TABLE ONLY span
    ADD CONSTRAINT span_pk PRIMARY KEY (tenant_id, trace_id, span_id, started_at);
CREATE INDEX span_run_idx ON span USING btree (tenant_id, run_id, started_at, span_id);
ALTER TABLE span ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON span USING ((tenant_id = ordo_current_tenant())) WITH CHECK ((tenant_id = ordo_current_tenant()));
GRANT SELECT ON TABLE span TO ordo_app;
GRANT SELECT,INSERT ON TABLE span TO ordo_system;

-- Small statistics for the engine's high-volume tables. Their statements find rows by key, so the
-- planner needs their row counts and how many distinct keys they hold, not a histogram of every
-- column, and ANALYZE samples 300 rows per unit of the largest statistics target and sorts each
-- sampled column. Columns no statement filters or joins on get no statistics (target 0); the keys
-- a target of 10 (3,000 rows sampled). The engine analyzes these tables as they grow (PlanRefresh).
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
          'started_at', 'finished_at', 'terminated_at', 'error', 'outputs_hash', 'logs_hash']),
      ('step', array['tenant_id', 'run_id', 'step_id', 'status', 'pending_deps'],
        array['reason', 'plugin', 'config', 'spec', 'depends_on', 'topo_index', 'dispatch_seq', 'attempts', 'epoch',
          'outputs', 'outputs_hash', 'logs_hash', 'error', 'from_rerun', 'queued_at', 'started_at', 'finished_at']),
      ('span', array['tenant_id', 'trace_id', 'span_id', 'started_at', 'run_id'],
        array['parent_span_id', 'name', 'kind', 'step_id', 'ended_at', 'status_code', 'status_message', 'attributes']),
      ('artifact', array['tenant_id', 'sha256', 'created_on'],
        array['media_type', 'size', 'body_json', 'body_bytes', 'created_at'])
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
