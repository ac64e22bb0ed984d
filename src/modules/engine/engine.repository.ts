import { Injectable } from '@nestjs/common';
import { sql } from 'kysely';
import type { SystemDb, SystemTx } from '../../core/database/handles';
import type { ErrorClass, JsonObject } from '../plugins/plugin';
import type { JobName } from './jobs';

export interface StepKey {
  tenantId: string;
  runId: string;
  stepId: string;
}

export interface StepState {
  tenant_id: string;
  run_id: string;
  step_id: string;
  status: string;
  epoch: number;
  attempts: number;
  spec: unknown;
  config: unknown;
  queued_at: Date | null;
}

export interface DispatchedStep {
  tenant_id: string;
  run_id: string;
  step_id: string;
  epoch: number;
  attempts: number;
  plugin: string;
  config: unknown;
  spec: unknown;
  depends_on: string[];
  queued_at: Date | null;
}

export interface ExpiredLease {
  tenant_id: string;
  run_id: string;
  step_id: string;
  epoch: number;
  /** The attempt the lease was given for (the step's current one). */
  attempt: number;
}

/** An artifact a statement stores with the results that name it (content-addressed per tenant). */
export interface ArtifactInput {
  tenant_id: string;
  sha256: string;
  media_type: string;
  /** The canonical JSON text whose SHA-256 is `sha256`. */
  body: string;
}

/** One attempt's result as ordo_engine_advance takes it. */
/** A waiting step's result, with the event of the decision that produced it (canonical JSON data). */
export type ResolveInput =
  | { result: ResultInput; artifacts: ArtifactInput[]; decided: { type: string; data: string } }
  | {
      items: { result: ResultInput; decided: { type: string; data: string } }[];
      artifacts: ArtifactInput[];
      /** Successors of plugin `only` dispatched to `worker` (see ordo_engine_resolve). */
      handOver?: Pick<AdvanceInput, 'worker' | 'leaseMs' | 'capacity' | 'cap' | 'sharedCap' | 'only'>;
    };

export interface ResultInput {
  tenant_id: string;
  run_id: string;
  step_id: string;
  attempt: number;
  /** The fencing epoch the attempt was claimed at: only a result at the step's current epoch applies. */
  epoch: number;
  /** As reported: `aborted` (stopped before it finished), `orphaned` (its lease expired; the reaper's). */
  status: 'succeeded' | 'failed' | 'aborted' | 'orphaned' | 'skipped' | 'waiting';
  /** Outputs kept inline on the step (null when only the artifact holds them). */
  outputs: unknown;
  outputs_hash: string | null;
  logs_hash: string | null;
  /** A failure's error; for `skipped`, why (`reason` and the step.skipped event's other data); for `waiting`, what for. */
  error:
    | { code: string; message: string; retryable: boolean; class?: ErrorClass; input?: string }
    | ({ reason: string } & Record<string, unknown>)
    | ({ kind: string } & Record<string, unknown>)
    | null;
  started_at: Date | null;
  finished_at: Date | null;
  /** Who reported it (default: the worker). */
  actor?: string;
  /** Its place in the batch: its events are appended in this order. */
  ord: number;
  /** The named status a success ends the step with (null: none). */
  named_status?: string | null;
}

/** Input of ordo_engine_advance: results, and the worker's room for their successors. */
export interface AdvanceInput {
  worker: string;
  leaseMs: number;
  capacity: number;
  /** The instance's per-tenant cap of steps in flight, and the shared one while tenants share (see ordo_in_flight_cap). */
  cap: number;
  sharedCap?: number;
  /** Only steps of this plugin are dispatched to the worker (see ordo_engine_resolve's handOver). */
  only?: string;
  results: ResultInput[];
  artifacts: ArtifactInput[];
  /** The elements of map steps handed back as waiting in `results` (ordo_map_expand), when there are any. */
  maps?: MapInput[];
  /** The tasks of queue steps handed back as waiting in `results` (ordo_task_open), when there are any. */
  tasks?: TaskInput[];
}

/** A queue step's task, as its attempt made it (see StepExecutor). */
export interface TaskInput {
  tenant_id: string;
  run_id: string;
  step_id: string;
  epoch: number;
  task: JsonObject;
}

/** A map step's elements, one instance each. */
export interface MapInput {
  tenant_id: string;
  run_id: string;
  step_id: string;
  epoch: number;
  items: unknown[];
}

/** A step a worker ran after the one before it succeeded, before that result committed. */
export interface LinkInput {
  step_id: string;
  outputs: unknown;
  outputs_hash: string;
  logs_hash: string | null;
  started_at: Date | null;
  finished_at: Date | null;
  /** The plugin and config the worker ran, and its attempt's traceparent. */
  plugin: string;
  config: unknown;
  traceparent: string;
}

/** Input of ordo_engine_chain: a claimed step's success and the chain's links after it, in the order they ran. */
export interface ChainInput {
  worker: string;
  leaseMs: number;
  capacity: number;
  /** The instance's per-tenant cap of steps in flight, and the shared one while tenants share (see ordo_in_flight_cap). */
  cap: number;
  sharedCap?: number;
  head: ResultInput;
  links: LinkInput[];
  artifacts: ArtifactInput[];
  /** The step the worker runs after the last link: dispatched to it under this traceparent. */
  ahead?: { step_id: string; traceparent: string };
}

/** Input of ordo_engine_claim. */
export interface ClaimInput {
  worker: string;
  leaseMs: number;
  capacity: number;
  /** The instance's per-tenant cap of steps in flight, and the shared one while tenants share (see ordo_in_flight_cap). */
  cap: number;
  sharedCap?: number;
  /** Leave out tenants and runs another transaction holds (a claim that must not wait). */
  skipLocked?: boolean;
  /** Tenants not to claim for. */
  exclude?: string[];
  /** The only tenants to claim for (all when absent). */
  only?: string[];
}

/**
 * A row of ordo_engine_advance, ordo_engine_chain and ordo_engine_claim: a dispatched step, a
 * committed event that starts or ends a run or retries a step, or a notification to send once the
 * statement has committed ([channel, payload], db/functions/ordo_notify.sql).
 */
export type AdvanceRow =
  | {
      kind: 'dispatch';
      item: DispatchedStep & {
        dispatch_seq: number;
        traceparent: string;
        dag_id: string;
        dag_version: number;
        trace_id: string;
        /** (Claims only) the step resumes its open attempt, which waited for its preconditions. */
        resumes?: boolean;
      };
    }
  | {
      kind: 'event';
      item: {
        tenantId: string;
        runId: string;
        seq: number;
        createdAt: string;
        type: string;
        stepId: string | null;
        attempt: number | null;
        actor: string;
        data: Record<string, unknown>;
        prevHash: string;
        hash: string;
        dagId: string;
        traceId: string;
        startedAt: string | null;
      };
    }
  | { kind: 'notify'; item: [channel: string, payload: string] };

const keysSql = (keys: StepKey[]) =>
  sql`unnest(${keys.map((k) => k.tenantId)}::text[], ${keys.map((k) => k.runId)}::uuid[], ${keys.map((k) => k.stepId)}::text[])`;

/**
 * System-side SQL of the execution engine: fair claims from the per-tenant queues, leases and
 * heartbeats, step and attempt state writes in bulk, job enqueueing. Callers hold the runs' row
 * locks (RunsRepository.lockRuns) before they change a run's steps.
 */
@Injectable()
export class EngineRepository {
  async stepStates(tx: SystemTx, keys: StepKey[]): Promise<StepState[]> {
    if (keys.length === 0) return [];
    const r = await sql<StepState>`
      select s.tenant_id, s.run_id, s.step_id, s.status, s.epoch, s.attempts, s.spec, s.config, s.queued_at
      from step s join ${keysSql(keys)} as k(tenant_id, run_id, step_id)
        on s.tenant_id = k.tenant_id and s.run_id = k.run_id and s.step_id = k.step_id`.execute(tx);
    return r.rows;
  }

  /** A step that may wait for its preconditions: its state, dependencies and when its attempt's ConditionPending phase began. */
  async preconditionState(
    tx: SystemTx,
    key: StepKey,
  ): Promise<
    | {
        status: string;
        epoch: number;
        attempts: number;
        spec: unknown;
        depends_on: string[];
        condition_pending_at: Date | null;
      }
    | undefined
  > {
    const r = await sql<{
      status: string;
      epoch: number;
      attempts: number;
      spec: unknown;
      depends_on: string[];
      condition_pending_at: Date | null;
    }>`
      select s.status, s.epoch, s.attempts, s.spec, s.depends_on, a.condition_pending_at from step s
      left join attempt a on a.tenant_id = s.tenant_id and a.run_id = s.run_id and a.step_id = s.step_id
        and a.attempt = s.attempts and a.epoch = s.epoch and a.status = 'running'
      where s.tenant_id = ${key.tenantId} and s.run_id = ${key.runId} and s.step_id = ${key.stepId}`.execute(tx);
    return r.rows[0];
  }

  /**
   * Records a check of a waiting step's preconditions (ordo_engine_precondition): queued again when
   * they hold, else checked again `nextMs` from now. False, having written nothing, when the step no
   * longer waits at `epoch`.
   */
  async preconditionChecked(
    tx: SystemTx,
    p: StepKey & { epoch: number; check: number; holds: boolean; nextMs: number; data: string },
  ): Promise<boolean> {
    const r = await sql<{ ok: boolean }>`select ordo_engine_precondition(${JSON.stringify(p)}::jsonb) as ok`.execute(
      tx,
    );
    return r.rows[0]?.ok === true;
  }

  /** Outputs of finished steps (for templating their dependents' `with`). */
  async outputsOf(
    tx: SystemTx,
    keys: StepKey[],
  ): Promise<
    {
      tenant_id: string;
      run_id: string;
      step_id: string;
      status: string;
      named_status: string | null;
      outputs: unknown;
      outputs_hash: string | null;
    }[]
  > {
    if (keys.length === 0) return [];
    const r = await sql<{
      tenant_id: string;
      run_id: string;
      step_id: string;
      status: string;
      named_status: string | null;
      outputs: unknown;
      outputs_hash: string | null;
    }>`
      select s.tenant_id, s.run_id, s.step_id, s.status, s.named_status, s.outputs, s.outputs_hash from step s
      join ${keysSql(keys)} as k(tenant_id, run_id, step_id)
        on s.tenant_id = k.tenant_id and s.run_id = k.run_id and s.step_id = k.step_id
      where s.status in ('succeeded', 'failed', 'skipped')`.execute(tx);
    return r.rows;
  }

  async runInputs(
    tx: SystemTx,
    keys: { tenantId: string; runId: string }[],
  ): Promise<{ tenant_id: string; run_id: string; inputs: unknown }[]> {
    if (keys.length === 0) return [];
    const r = await sql<{ tenant_id: string; run_id: string; inputs: unknown }>`
      select r.tenant_id, r.run_id, r.inputs from run r
      join unnest(${keys.map((k) => k.tenantId)}::text[], ${keys.map((k) => k.runId)}::uuid[]) as k(tenant_id, run_id)
        on r.tenant_id = k.tenant_id and r.run_id = k.run_id`.execute(tx);
    return r.rows;
  }

  /** Extends the leases this worker still holds; returns the ones it holds. */
  async heartbeat(
    tx: SystemTx,
    workerId: string,
    items: (StepKey & { epoch: number })[],
    leaseMs: number,
  ): Promise<StepKey[]> {
    if (items.length === 0) return [];
    const r = await sql<{ tenant_id: string; run_id: string; step_id: string }>`
      update queue_item q set lease_expires_at = now() + make_interval(secs => ${leaseMs / 1000})
      from unnest(${items.map((k) => k.tenantId)}::text[], ${items.map((k) => k.runId)}::uuid[], ${items.map((k) => k.stepId)}::text[],
        ${items.map((k) => k.epoch)}::int[]) as u(tenant_id, run_id, step_id, epoch)
      where q.tenant_id = u.tenant_id and q.run_id = u.run_id and q.step_id = u.step_id
        -- (An item with an epoch is leased; not naming the state keeps the lease index out of the plan.)
        and q.worker_id = ${workerId} and q.epoch = u.epoch
      returning q.tenant_id, q.run_id, q.step_id`.execute(tx);
    return r.rows.map((x) => ({ tenantId: x.tenant_id, runId: x.run_id, stepId: x.step_id }));
  }

  /** Expired leases, oldest first, with the attempt each was given for. */
  async expiredLeases(db: SystemDb, limit: number): Promise<ExpiredLease[]> {
    const r = await sql<ExpiredLease>`
      select q.tenant_id, q.run_id, q.step_id, q.epoch, s.attempts as attempt from queue_item q
      join step s on s.tenant_id = q.tenant_id and s.run_id = q.run_id and s.step_id = q.step_id
      where q.state = 'leased' and q.lease_expires_at < now()
      order by q.lease_expires_at limit ${limit}`.execute(db);
    return r.rows;
  }

  /**
   * What results do, in one statement committed on its own (db/functions/ordo_engine_advance.sql):
   * applied, retried, failed or refused; successors dispatched to `worker` (up to `capacity`) or
   * queued; runs ended.
   */
  async advance(db: SystemDb | SystemTx, p: AdvanceInput): Promise<AdvanceRow[]> {
    return (await sql<AdvanceRow>`select kind, item from ordo_engine_advance(${JSON.stringify(p)}::jsonb)`.execute(db))
      .rows;
  }

  /** The definition of a DAG version (immutable), as published. */
  async dagDefinition(db: SystemDb, tenantId: string, dagId: string, version: number): Promise<unknown> {
    const r = await sql<{ definition: unknown }>`
      select definition from dag_version where tenant_id = ${tenantId} and dag_id = ${dagId} and version = ${version}`.execute(
      db,
    );
    return r.rows[0]?.definition ?? null;
  }

  /**
   * A chain of results in one statement, committed on its own (db/functions/ordo_engine_chain.sql):
   * a success and the links a worker ran after it; with no link, the hop for one success. Raises
   * SQLSTATE OR001 (nothing written) when the chain does not hold; its results then go to `advance`.
   */
  async chain(db: SystemDb, p: ChainInput): Promise<AdvanceRow[]> {
    return (await sql<AdvanceRow>`select kind, item from ordo_engine_chain(${JSON.stringify(p)}::jsonb)`.execute(db))
      .rows;
  }

  /**
   * Decisions on waiting steps, committed on their own (db/functions/ordo_engine_resolve.sql): a
   * row ('refused', {tenant_id, run_id, step_id, status, epoch}) for each step that no longer waits
   * at its epoch; and what ordo_engine_advance returns for the other results.
   */
  async resolve(db: SystemDb | SystemTx, p: ResolveInput): Promise<AdvanceRow[]> {
    return (await sql<AdvanceRow>`select kind, item from ordo_engine_resolve(${JSON.stringify(p)}::jsonb)`.execute(db))
      .rows;
  }

  /**
   * The claim from the queue (db/functions/ordo_engine_claim.sql): fair rounds across tenants,
   * dispatch, events and bookkeeping in one statement. On the engine's handle it
   * commits on its own; in a transaction it is part of it.
   */
  async claim(db: SystemDb | SystemTx, p: ClaimInput): Promise<AdvanceRow[]> {
    const r = await sql<AdvanceRow>`select kind, item from ordo_engine_claim(${JSON.stringify(p)}::jsonb)`.execute(db);
    return r.rows;
  }

  /**
   * Sends notifications an engine statement collected (its 'n' rows) in a transaction of their own,
   * which writes nothing: the lock PostgreSQL takes at the commit of a notifying transaction is held
   * only while they are queued.
   */
  async notify(db: SystemDb, notifications: [string, string][]): Promise<void> {
    await sql`select pg_notify(n->>0, n->>1) from jsonb_array_elements(${JSON.stringify(notifications)}::jsonb) n`.execute(
      db,
    );
  }

  /** Adds a graphile-worker job in the caller's transaction (deterministic job_key: at most one pending per key). */
  async addJob(
    tx: SystemTx,
    name: JobName,
    payload: unknown,
    opts: { runAt?: Date; jobKey: string; maxAttempts: number },
  ): Promise<void> {
    await sql`select graphile_worker.add_job(${name}, ${JSON.stringify(payload)}::json, run_at => ${opts.runAt ?? null}::timestamptz,
      job_key => ${opts.jobKey}, max_attempts => ${opts.maxAttempts})`.execute(tx);
  }

  async webhookSecret(tx: SystemTx, tenantId: string, fresh: string): Promise<string> {
    await sql`insert into tenant_webhook_secret (tenant_id, secret) values (${tenantId}, ${fresh}) on conflict do nothing`.execute(
      tx,
    );
    const r = await sql<{
      secret: string;
    }>`select secret from tenant_webhook_secret where tenant_id = ${tenantId}`.execute(tx);
    return r.rows[0].secret;
  }

  async event(tx: SystemTx, tenantId: string, runId: string, seq: number) {
    const r = await sql<{
      type: string;
      step_id: string | null;
      data: unknown;
      created_at: Date;
      hash: string;
      actor: string;
    }>`
      select type, step_id, data, created_at, hash, actor from run_event where tenant_id = ${tenantId} and run_id = ${runId} and seq = ${seq}`.execute(
      tx,
    );
    return r.rows[0];
  }
}
