import { Injectable } from '@nestjs/common';
import { sql } from 'kysely';
import type { SystemDb, SystemTx } from '../../core/database/handles';
import type { NewArtifact } from '../artifacts/artifacts.repository';
import { gateSql, type RunBookRow } from '../runs/runs.repository';
import type { JobName } from './jobs';

export interface FinishAttempt extends StepKey {
  attempt: number;
  epoch: number;
  status: string;
  error: unknown;
  outputsHash: string | null;
  logsHash: string | null;
  startedAt: Date | null;
  finishedAt: Date | null;
}

export interface SetStep extends StepKey {
  from: string[];
  to: string;
  reason?: string | null;
  outputs?: unknown;
  outputsHash?: string | null;
  logsHash?: string | null;
  error?: unknown;
  terminal: boolean;
  queued?: boolean;
}

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

/** A step left with no pending dependency by a release, and whether it was queued. */
export interface ReadyStep {
  tenant_id: string;
  run_id: string;
  step_id: string;
  topo_index: number;
  disabled: boolean;
  queued: boolean;
}

export interface ExpiredLease {
  tenant_id: string;
  id: number;
  run_id: string;
  step_id: string;
  epoch: number;
  worker_id: string;
}

/** Input of ordo_engine_advance: the worker's successful results and its room for successors. */
export interface AdvanceInput {
  worker: string;
  leaseMs: number;
  capacity: number;
  cap: number;
  completions: {
    t: string;
    r: string;
    s: string;
    a: number;
    e: number;
    /** Outputs kept inline on the step (null when only the artifact holds them). */
    o: unknown;
    oh: string;
    lh: string | null;
    sa: Date | null;
    fa: Date | null;
    ord: number;
  }[];
  artifacts: { t: string; h: string; m: string; b: string }[];
}

/** Input of ordo_engine_chain: a claimed step's result and the chain's links after it, in the order they ran. */
export interface ChainInput extends AdvanceInput {
  links: (Omit<AdvanceInput['completions'][number], 't' | 'r' | 'a' | 'e' | 'ord'> & {
    /** The plugin and config the worker ran, and its attempt's traceparent. */
    pl: string;
    cf: unknown;
    tp: string;
  })[];
  /** The step the worker runs after the last link: dispatched to it under this traceparent. */
  ahead?: { s: string; tp: string };
}

/** Input of ordo_engine_claim. */
export interface ClaimInput {
  worker: string;
  leaseMs: number;
  capacity: number;
  cap: number;
  /** Leave out tenants and runs another transaction holds (a claim that must not wait). */
  skipLocked?: boolean;
  /** Tenants not to claim for. */
  exclude?: string[];
  /** The only tenants to claim for (all when absent). */
  only?: string[];
}

/**
 * A row of ordo_engine_advance, ordo_engine_chain and ordo_engine_claim: a dispatched step ('d'), a
 * committed run or retry event ('e'), or a notification to send once the statement has committed
 * ('n': [channel, payload], db/functions/ordo_notify.sql).
 */
export type AdvanceRow =
  | {
      kind: 'd';
      item: DispatchedStep & {
        dispatch_seq: number;
        traceparent: string;
        dag_id: string;
        dag_version: number;
        trace_id: string;
      };
    }
  | {
      kind: 'e';
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
  | { kind: 'n'; item: [channel: string, payload: string] };

const keysSql = (keys: StepKey[]) =>
  sql`unnest(${keys.map((k) => k.tenantId)}::text[], ${keys.map((k) => k.runId)}::uuid[], ${keys.map((k) => k.stepId)}::text[])`;

/**
 * System-side SQL of the execution engine: fair claims from the per-tenant queues, leases and
 * heartbeats, step and attempt state writes in bulk, job enqueueing. Callers hold the runs' row
 * locks (RunsRepository.lockRuns) before they change a run's steps.
 */
@Injectable()
export class EngineRepository {
  /**
   * One statement: locks the runs (in key order, like RunsRepository.lockRuns) and then the given
   * steps, returning the runs' bookkeeping and the steps' current states (the latest committed
   * versions: locked rows are re-read after any wait).
   */
  async lockRunsAndSteps(tx: SystemTx, keys: StepKey[]): Promise<{ runs: RunBookRow[]; states: StepState[] }> {
    if (keys.length === 0) return { runs: [], states: [] };
    const r = await sql<{ kind: 'r' | 's'; row: Record<string, unknown> }>`
      with rl as (
        select r.tenant_id, r.run_id, r.dag_id, r.dag_version, r.status, r.trace_id, r.event_seq, r.event_hash, r.dispatch_count,
          r.steps_remaining, r.steps_failed, r.started_at
        from run r
        join (select distinct k.tenant_id, k.run_id from ${keysSql(keys)} as k(tenant_id, run_id, step_id)) k
          on r.tenant_id = k.tenant_id and r.run_id = k.run_id
        order by r.tenant_id, r.run_id
        for update of r
      ),
      sl as (
        select s.tenant_id, s.run_id, s.step_id, s.status, s.epoch, s.attempts, s.spec, s.queued_at
        from step s join ${keysSql(keys)} as k(tenant_id, run_id, step_id)
          on s.tenant_id = k.tenant_id and s.run_id = k.run_id and s.step_id = k.step_id
        order by s.tenant_id, s.run_id, s.step_id
        for update of s
      )
      select 'r' as kind, to_jsonb(rl) as row from rl
      union all
      select 's', to_jsonb(sl) from sl`.execute(tx);
    const runs: RunBookRow[] = [];
    const states: StepState[] = [];
    for (const x of r.rows) {
      if (x.kind === 'r') {
        const row = x.row as unknown as RunBookRow & { started_at: string | null };
        runs.push({ ...row, started_at: row.started_at === null ? null : new Date(row.started_at) });
      } else {
        const row = x.row as unknown as StepState & { queued_at: string | null };
        states.push({ ...row, queued_at: row.queued_at === null ? null : new Date(row.queued_at) });
      }
    }
    return { runs, states };
  }

  async stepStates(tx: SystemTx, keys: StepKey[]): Promise<StepState[]> {
    if (keys.length === 0) return [];
    const r = await sql<StepState>`
      select s.tenant_id, s.run_id, s.step_id, s.status, s.epoch, s.attempts, s.spec, s.queued_at
      from step s join ${keysSql(keys)} as k(tenant_id, run_id, step_id)
        on s.tenant_id = k.tenant_id and s.run_id = k.run_id and s.step_id = k.step_id`.execute(tx);
    return r.rows;
  }

  async deleteItems(tx: SystemTx, items: { tenantId: string; id: number }[]): Promise<void> {
    if (items.length === 0) return;
    await sql`
      delete from queue_item q using unnest(${items.map((i) => i.tenantId)}::text[], ${items.map((i) => i.id)}::bigint[]) as u(tenant_id, id)
      where q.tenant_id = u.tenant_id and q.id = u.id`.execute(tx);
  }

  /** Ends running attempts (only those still running at that epoch). */
  async finishAttempts(tx: SystemTx, rows: FinishAttempt[]): Promise<void> {
    if (rows.length === 0) return;
    await sql`${finishAttemptsSql(rows)}`.execute(tx);
  }

  /** Sets step states (each write names the states it may come from: the transition table). */
  async setSteps(tx: SystemTx, rows: SetStep[]): Promise<StepKey[]> {
    if (rows.length === 0) return [];
    const r = await sql<{ tenant_id: string; run_id: string; step_id: string }>`${setStepsSql(rows)}`.execute(tx);
    return r.rows.map((x) => ({ tenantId: x.tenant_id, runId: x.run_id, stepId: x.step_id }));
  }

  /**
   * The write half of applying a batch of results, as one statement: attempts end, steps move on
   * (returned, to check every transition was allowed), the workers' leases are released and
   * artifacts are stored.
   */
  async completeBatch(
    tx: SystemTx,
    b: {
      attempts: FinishAttempt[];
      steps: SetStep[];
      released: (StepKey & { epoch: number })[];
      artifacts: NewArtifact[];
      /** Steps that succeeded in this batch: their dependents are counted down and queued (see releaseAndQueue). */
      done?: StepKey[];
    },
  ): Promise<{ written: StepKey[]; ready: ReadyStep[] }> {
    const rel = b.released;
    const done = b.done ?? [];
    const arts = [...new Map(b.artifacts.map((a) => [`${a.tenantId}/${a.sha256}`, a])).values()];
    const r = await sql<{
      kind: 'w' | 'r';
      tenant_id: string;
      run_id: string;
      step_id: string;
      topo_index: number | null;
      disabled: boolean | null;
      queued: boolean | null;
    }>`
      with fa as (${b.attempts.length > 0 ? sql`${finishAttemptsSql(b.attempts)} returning 1` : sql`select 1`}),
      st as (${b.steps.length > 0 ? setStepsSql(b.steps) : sql`select null::text as tenant_id, null::uuid as run_id, null::text as step_id where false`}),
      rl as (
        delete from queue_item q
        using unnest(${rel.map((k) => k.tenantId)}::text[], ${rel.map((k) => k.runId)}::uuid[], ${rel.map((k) => k.stepId)}::text[],
          ${rel.map((k) => k.epoch)}::int[]) as u(tenant_id, run_id, step_id, epoch)
        -- (An item with an epoch is leased; not naming the state keeps the lease index out of the plan.)
        where q.tenant_id = u.tenant_id and q.run_id = u.run_id and q.step_id = u.step_id and q.epoch = u.epoch
        returning q.tenant_id
      ),
      ar as (
        insert into artifact (tenant_id, sha256, media_type, size, body_json)
        select u.tenant_id, u.sha256, u.media_type, octet_length(u.body), u.body::jsonb
        from unnest(${arts.map((a) => a.tenantId)}::text[], ${arts.map((a) => a.sha256)}::text[],
          ${arts.map((a) => a.mediaType)}::text[], ${arts.map((a) => a.json)}::text[]) as u(tenant_id, sha256, media_type, body)
        on conflict do nothing
        returning 1
      )${done.length > 0 ? sql`, ${releaseCtes(done)}` : sql``}
      select 'w' as kind, tenant_id, run_id, step_id, null::int as topo_index, null::bool as disabled, null::bool as queued,
        null::bigint as notified from st
      ${
        done.length > 0
          ? sql`union all
      select 'r', u.tenant_id, u.run_id, u.step_id, u.topo_index, u.disabled, u.ready,
        case when u.ready then (select count(*) from w) end as notified
      from u where u.pending_deps = 0`
          : sql``
      }`.execute(tx);
    const written: StepKey[] = [];
    const ready: ReadyStep[] = [];
    for (const x of r.rows) {
      if (x.kind === 'w') written.push({ tenantId: x.tenant_id, runId: x.run_id, stepId: x.step_id });
      else
        ready.push({
          tenant_id: x.tenant_id,
          run_id: x.run_id,
          step_id: x.step_id,
          topo_index: x.topo_index!,
          disabled: x.disabled!,
          queued: x.queued!,
        });
    }
    return { written, ready };
  }

  /**
   * One statement: counts finished dependencies down (each pending step that depends on a step in
   * `done` loses one pending dependency per such step) and moves the steps
   * left with none — unless disabled or their run has ended — to queued, putting them into the
   * ready queue in topological order and waking workers. Returns every step left with no pending
   * dependency, with whether it was queued.
   */
  async releaseAndQueue(tx: SystemTx, done: StepKey[]): Promise<ReadyStep[]> {
    if (done.length === 0) return [];
    const r = await sql<ReadyStep>`
      with ${releaseCtes(done)}
      select u.tenant_id, u.run_id, u.step_id, u.topo_index, u.disabled, u.ready as queued,
        case when u.ready then (select count(*) from w) end as notified
      from u where u.pending_deps = 0`.execute(tx);
    return r.rows;
  }

  /** Every pending step downstream of the given failed steps (within their runs). */
  async pendingDescendants(tx: SystemTx, failed: StepKey[]): Promise<StepKey[]> {
    if (failed.length === 0) return [];
    const r = await sql<{ tenant_id: string; run_id: string; step_id: string }>`
      with recursive down(tenant_id, run_id, step_id) as (
        select k.tenant_id, k.run_id, k.step_id from ${keysSql(failed)} as k(tenant_id, run_id, step_id)
        union
        select s.tenant_id, s.run_id, s.step_id from down
        join step s on s.tenant_id = down.tenant_id and s.run_id = down.run_id and down.step_id = any(s.depends_on)
      )
      select d.tenant_id, d.run_id, d.step_id from down d
      join step s on s.tenant_id = d.tenant_id and s.run_id = d.run_id and s.step_id = d.step_id
      where s.status = 'pending'
      order by d.tenant_id, d.run_id, s.topo_index`.execute(tx);
    return r.rows.map((x) => ({ tenantId: x.tenant_id, runId: x.run_id, stepId: x.step_id }));
  }

  /** Outputs of finished steps (for templating their dependents' `with`). */
  async outputsOf(
    tx: SystemTx,
    keys: StepKey[],
  ): Promise<{ tenant_id: string; run_id: string; step_id: string; outputs: unknown; outputs_hash: string | null }[]> {
    if (keys.length === 0) return [];
    const r = await sql<{
      tenant_id: string;
      run_id: string;
      step_id: string;
      outputs: unknown;
      outputs_hash: string | null;
    }>`
      select s.tenant_id, s.run_id, s.step_id, s.outputs, s.outputs_hash from step s
      join ${keysSql(keys)} as k(tenant_id, run_id, step_id)
        on s.tenant_id = k.tenant_id and s.run_id = k.run_id and s.step_id = k.step_id
      where s.status = 'succeeded'`.execute(tx);
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

  /** Expired leases, oldest first, locked (skipping ones another reaper holds). */
  async expiredLeases(tx: SystemTx, limit: number): Promise<ExpiredLease[]> {
    const r = await sql<ExpiredLease>`
      select tenant_id, id, run_id, step_id, epoch, worker_id from queue_item
      where state = 'leased' and lease_expires_at < now()
      order by lease_expires_at limit ${limit}
      for update skip locked`.execute(tx);
    return r.rows;
  }

  /**
   * The one-statement hop (db/functions/ordo_engine_advance.sql), committed on its own: applies
   * successful results, makes their successors ready and dispatches up to `capacity` of them to
   * `worker`, appending the chained events. Raises SQLSTATE OR001 (nothing written) when the
   * batch needs the general engine transaction. A batch of one goes to ordo_engine_chain with no
   * link (db/functions/ordo_engine_chain.sql): the same hop, with statements that look up its
   * one run by key.
   */
  async advance(db: SystemDb, p: AdvanceInput): Promise<AdvanceRow[]> {
    if (p.completions.length === 1) return this.chain(db, p);
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
   * a result and the links a worker ran after it; with no link, the hop for one result.
   * Raises SQLSTATE OR001 (nothing written) when the chain does not hold or needs the general transaction.
   */
  async chain(db: SystemDb, p: AdvanceInput | ChainInput): Promise<AdvanceRow[]> {
    return (await sql<AdvanceRow>`select kind, item from ordo_engine_chain(${JSON.stringify(p)}::jsonb)`.execute(db))
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

/**
 * CTEs d, u, i, w: counts finished dependencies down (each pending step that depends on a step in
 * `done` loses one pending dependency per such step) and moves the steps left with none — unless
 * disabled or their run has ended — to queued, putting them into the ready queue in topological
 * order (a step with a concurrency limit under its gate) and waking workers (one notification per
 * tenant, the tenant id as payload).
 */
function releaseCtes(done: StepKey[]) {
  return sql`
      d as (
        select s.tenant_id, s.run_id, s.step_id, count(*)::int as n,
          s.pending_deps - count(*)::int = 0 and not coalesce((s.spec->>'disabled')::boolean, false)
            and r.status in ('queued', 'running') as ready,
          ${gateSql} as gate
        from ${keysSql(done)} as k(tenant_id, run_id, step_id)
        join step s on s.tenant_id = k.tenant_id and s.run_id = k.run_id and k.step_id = any(s.depends_on)
        join run r on r.tenant_id = s.tenant_id and r.run_id = s.run_id
        where s.status = 'pending'
        group by s.tenant_id, s.run_id, s.step_id, s.pending_deps, s.spec, r.status, r.dag_id
      ),
      u as (
        update step s set pending_deps = s.pending_deps - d.n,
          status = case when d.ready then 'queued' else s.status end,
          queued_at = case when d.ready then now() else s.queued_at end
        from d where s.tenant_id = d.tenant_id and s.run_id = d.run_id and s.step_id = d.step_id
        returning s.tenant_id, s.run_id, s.step_id, s.topo_index, s.pending_deps, d.ready,
          coalesce((s.spec->>'disabled')::boolean, false) as disabled, d.gate, (s.spec->>'concurrency')::int as gate_limit
      ),
      i as (
        insert into queue_item (tenant_id, run_id, step_id, gate, gate_limit)
        select tenant_id, run_id, step_id, gate, gate_limit from u where ready order by tenant_id, run_id, topo_index, step_id
        returning 1
      ),
      w as (select pg_notify('ordo_ready', x.tenant_id) as x from (select distinct tenant_id from u where ready) x)`;
}

const json = (v: unknown) => (v === undefined || v === null ? null : JSON.stringify(v));

function finishAttemptsSql(rows: FinishAttempt[]) {
  return sql`
    update attempt a set status = u.status, error = u.error::jsonb, outputs_hash = u.outputs_hash, logs_hash = u.logs_hash,
      started_at = coalesce(u.started_at, a.started_at), finished_at = coalesce(u.finished_at, a.finished_at), terminated_at = now()
    from unnest(${rows.map((r) => r.tenantId)}::text[], ${rows.map((r) => r.runId)}::uuid[], ${rows.map((r) => r.stepId)}::text[],
      ${rows.map((r) => r.attempt)}::int[], ${rows.map((r) => r.epoch)}::int[], ${rows.map((r) => r.status)}::text[],
      ${rows.map((r) => json(r.error))}::text[], ${rows.map((r) => r.outputsHash)}::text[], ${rows.map((r) => r.logsHash)}::text[],
      ${rows.map((r) => r.startedAt)}::timestamptz[], ${rows.map((r) => r.finishedAt)}::timestamptz[])
      as u(tenant_id, run_id, step_id, attempt, epoch, status, error, outputs_hash, logs_hash, started_at, finished_at)
    where a.tenant_id = u.tenant_id and a.run_id = u.run_id and a.step_id = u.step_id and a.attempt = u.attempt
      and a.epoch = u.epoch and a.status = 'running'`;
}

function setStepsSql(rows: SetStep[]) {
  return sql`
    update step s set status = u.status, reason = coalesce(u.reason, s.reason),
      outputs = coalesce(u.outputs::jsonb, s.outputs), outputs_hash = coalesce(u.outputs_hash, s.outputs_hash),
      logs_hash = coalesce(u.logs_hash, s.logs_hash), error = coalesce(u.error::jsonb, s.error),
      finished_at = case when u.terminal then now() else s.finished_at end,
      queued_at = case when u.queued then now() else s.queued_at end
    from unnest(${rows.map((r) => r.tenantId)}::text[], ${rows.map((r) => r.runId)}::uuid[], ${rows.map((r) => r.stepId)}::text[],
      ${rows.map((r) => JSON.stringify(r.from))}::text[], ${rows.map((r) => r.to)}::text[], ${rows.map((r) => r.reason ?? null)}::text[],
      ${rows.map((r) => json(r.outputs))}::text[], ${rows.map((r) => r.outputsHash ?? null)}::text[], ${rows.map((r) => r.logsHash ?? null)}::text[],
      ${rows.map((r) => json(r.error))}::text[], ${rows.map((r) => r.terminal)}::bool[], ${rows.map((r) => r.queued ?? false)}::bool[])
      as u(tenant_id, run_id, step_id, from_states, status, reason, outputs, outputs_hash, logs_hash, error, terminal, queued)
    where s.tenant_id = u.tenant_id and s.run_id = u.run_id and s.step_id = u.step_id
      and s.status in (select jsonb_array_elements_text(u.from_states::jsonb))
    returning s.tenant_id, s.run_id, s.step_id`;
}
