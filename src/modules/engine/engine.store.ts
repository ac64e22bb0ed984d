import { Injectable, Logger, type OnApplicationShutdown } from '@nestjs/common';
import { Database } from '../../core/database/database';
import type { SystemDb, SystemTx } from '../../core/database/handles';
import { preparedKysely } from '../../core/database/prepared';
import { canonicalHash } from '../../core/json/canonical-json';
import { recordDispatch } from '../../core/telemetry/metrics';
import { observeCommittedEvents } from '../../core/telemetry/run-observer';
import { jsonArtifact, type NewArtifact, ArtifactsRepository } from '../artifacts/artifacts.repository';
import { backoffMs } from '../dags/dag-definition';
import type { JsonObject, JsonValue, PluginError, StepLogLine } from '../plugins/plugin';
import { admitWaitingRuns } from '../runs/run-admission';
import { RunBooks, runKey } from '../runs/run-book';
import type { StepSpec } from '../runs/run-plan';
import { RunsRepository } from '../runs/runs.repository';
import {
  EngineRepository,
  type AdvanceInput,
  type ChainInput,
  type AdvanceRow,
  type ClaimInput,
  type FinishAttempt,
  type ReadyStep,
  type SetStep,
  type StepKey,
  type StepState,
} from './engine.repository';
import { JOBS, type JobPayload } from './jobs';
import { NotifyOutbox } from './notify-outbox';

/** Outputs up to this size (canonical JSON bytes) also stay inline on the step row. */
const INLINE_OUTPUTS_BYTES = 8 * 1024;

/** What a worker reports for an attempt it ran. */
export interface Completion extends StepKey {
  attempt: number;
  epoch: number;
  workerId: string;
  outcome:
    | { status: 'succeeded'; outputs: JsonObject; logs: StepLogLine[] }
    | { status: 'failed'; error: PluginError; logs: StepLogLine[] }
    /** The attempt stopped because its run was cancelled (or its lease was lost): nothing to apply. */
    | { status: 'aborted'; logs: StepLogLine[] };
  startedAt: Date | null;
  finishedAt: Date | null;
}

/** What a worker reports for `w` (the attempt and epoch it was claimed at) with `outcome`. */
export function completionFor(
  w: StepKey & { attempt: number; epoch: number },
  workerId: string,
  outcome: Completion['outcome'],
  startedAt: Date | null = null,
  finishedAt: Date | null = null,
): Completion {
  const { tenantId, runId, stepId, attempt, epoch } = w;
  return { tenantId, runId, stepId, attempt, epoch, workerId, outcome, startedAt, finishedAt };
}

/** A step attempt a worker has claimed and must run. */
export interface ClaimedWork extends StepKey {
  attempt: number;
  epoch: number;
  plugin: string;
  config: JsonObject;
  spec: StepSpec;
  dagId: string;
  dagVersion: number;
  traceId: string;
  traceparent: string;
  dispatchSeq: number;
  inputs: JsonValue;
  /** Outputs of the step's dependencies, by step id (only when `needsData`). */
  upstream: Record<string, { outputs: JsonValue }>;
  /** Its config is templated or its plugin takes run data: inputs and upstream are loaded. */
  needsData: boolean;
  /** The step's dependencies (whose outputs are loaded when `needsData`). */
  dependsOn?: string[];
}

export interface ClaimOptions {
  workerId: string;
  capacity: number;
  leaseMs: number;
  tenantCap: number;
  /** Whether a plugin wants the run's inputs and upstream outputs even without templates in its config. */
  receivesRunData?: (plugin: string) => boolean;
}

/** A step a worker ran after the step before it succeeded, before that result committed (see `chain`). */
export interface ChainLink {
  /** Its result, reported at attempt 1 (the epoch is the database's). */
  completion: Completion;
  /** The plugin and config it ran: the step's own, or the chain is refused. */
  plugin: string;
  config: JsonObject;
  traceparent: string;
}

interface Outcome extends StepKey {
  attempt: number;
  epoch: number;
  kind: 'succeeded' | 'failed' | 'orphaned';
  outputs?: JsonObject;
  logs?: StepLogLine[];
  error?: PluginError;
  startedAt?: Date | null;
  finishedAt?: Date | null;
  actor: string;
}

const key3 = (k: StepKey) => `${k.tenantId}/${k.runId}/${k.stepId}`;
const isTemplated = (v: unknown): boolean => JSON.stringify(v).includes('${{');

/**
 * The engine's transactions. One worker cycle applies a batch of results (group commit), makes
 * the successors ready, enqueues them and claims the next batch, in ONE transaction: a crash at
 * any point loses nothing and applies nothing twice. Every step change goes through the
 * transition table (each UPDATE names its allowed source states; the database trigger checks
 * again) and appends chained events to its run.
 */
@Injectable()
export class EngineStore implements OnApplicationShutdown {
  private readonly log = new Logger('engine');
  /** The system handle with prepared (parse- and plan-once) statements. */
  private readonly sys: SystemDb;
  /** Notifications of committed engine statements, sent after their commit. */
  private readonly outbox: NotifyOutbox;

  constructor(
    private readonly db: Database,
    private readonly engine: EngineRepository,
    private readonly runs: RunsRepository,
    private readonly artifacts: ArtifactsRepository,
  ) {
    // Plans follow the tables as they grow: custom plans for the statements sent from here, and the
    // engine functions' generic plans re-made when a table doubles (PlanRefresh).
    this.sys = preparedKysely(db.systemPool, {
      prefix: 'ordo_e_',
      refresh: db.planRefresh,
      init: 'set plan_cache_mode = force_custom_plan',
    }) as SystemDb;
    this.outbox = new NotifyOutbox(
      (batch) => this.engine.notify(this.sys, batch),
      (e) => this.log.warn({ err: e }, 'notifications after commit not sent'),
    );
  }

  /** A system transaction on the engine's prepared-statement handle. */
  private withSystem<T>(fn: (tx: SystemTx) => Promise<T>): Promise<T> {
    return this.sys.transaction().execute((trx) => fn(trx as unknown as SystemTx));
  }

  /**
   * The general turn: applies `completions` and claims up to `opts.capacity` steps from the queue,
   * in one transaction. With no completions it is the claim alone: one statement.
   */
  async cycle(completions: Completion[], opts: ClaimOptions): Promise<ClaimedWork[]> {
    if (completions.length === 0) return opts.capacity > 0 ? this.claimFromQueue(opts) : [];
    const committed: { books?: RunBooks; claimed?: AdvanceRow[] } = {};
    const claimedWork = await this.withSystem(async (tx) => {
      // The completions' runs and steps, locked in one statement.
      const locked = await this.engine.lockRunsAndSteps(tx, completions);
      const books = (committed.books = new RunBooks(locked.runs));
      const ctx = new CycleContext(books);
      await this.applyCompletions(tx, ctx, completions, locked.states);
      await this.flush(tx, ctx, books);
      // Released slots count before this turn claims: the successors of these results can start now.
      if (opts.capacity <= 0) return [];
      // This transaction already holds the results' runs: the claim never waits for another
      // transaction's runs or tenants (waiting while holding locks could deadlock); what it leaves
      // is claimed by the next turn.
      const rows = (committed.claimed = await this.engine.claim(tx, { ...claimInput(opts), skipLocked: true }));
      const work = this.dispatched(rows, opts);
      await this.fillTemplateScope(tx, work);
      return work;
    });
    if (committed.books) observe(committed.books);
    if (committed.claimed) this.committed(committed.claimed);
    return claimedWork;
  }

  /** A claim from the queue in one statement (ordo_engine_claim), committed on its own. */
  private async claimFromQueue(opts: SideClaimOptions, skipLocked = false): Promise<ClaimedWork[]> {
    const rows = await this.engine.claim(this.sys, {
      ...claimInput(opts),
      skipLocked,
      exclude: opts.excludeTenants ?? [],
      ...(opts.onlyTenants ? { only: opts.onlyTenants } : {}),
    });
    return this.committedWork(rows, opts);
  }

  /** The work of a committed hop or claim: its events observed, its steps with their template data. */
  private async committedWork(rows: AdvanceRow[], opts: ClaimOptions): Promise<ClaimedWork[]> {
    this.committed(rows);
    const work = this.dispatched(rows, opts);
    if (work.some((w) => w.needsData)) await this.withSystem((tx) => this.fillTemplateScope(tx, work));
    return work;
  }

  /**
   * After an engine statement committed: its notifications sent (wake-ups, the live stream, run
   * ends) without waiting for them (see NotifyOutbox), and its events observed. A notification lost
   * to a crash at this point delays a wake-up until the workers' safety poll and the stream's next pull.
   */
  private committed(rows: AdvanceRow[]): void {
    this.outbox.add(rows.flatMap((r) => (r.kind === 'n' ? [r.item] : [])));
    observeRows(rows);
  }

  /** At shutdown, the notifications that wait are sent at once (and so is everything committed later). */
  async onApplicationShutdown(): Promise<void> {
    await this.outbox.close();
  }

  /** The work a worker runs for dispatched steps (as ordo_engine_advance and ordo_engine_claim return them). */
  private dispatched(rows: AdvanceRow[], opts: ClaimOptions): ClaimedWork[] {
    const now = new Date();
    const work: ClaimedWork[] = [];
    for (const r of rows) {
      if (r.kind !== 'd') continue;
      const d = r.item;
      recordDispatch(d.tenant_id, d.queued_at ? new Date(d.queued_at) : now, now);
      const config = d.config as JsonObject;
      work.push({
        tenantId: d.tenant_id,
        runId: d.run_id,
        stepId: d.step_id,
        attempt: d.attempts,
        epoch: d.epoch,
        plugin: d.plugin,
        config,
        spec: d.spec as StepSpec,
        dagId: d.dag_id,
        dagVersion: d.dag_version,
        traceId: d.trace_id,
        traceparent: d.traceparent,
        dispatchSeq: d.dispatch_seq,
        inputs: {},
        upstream: {},
        needsData: isTemplated(config) || opts.receivesRunData?.(d.plugin) === true,
        dependsOn: d.depends_on,
      });
    }
    return work;
  }

  /**
   * The common hop in one statement and one commit (ordo_engine_advance): every completion
   * succeeded; their successors that become ready are dispatched to this worker (up to
   * `opts.capacity`, under the tenant cap) and the rest queued. Returns null, having written
   * nothing, when the batch needs the general transaction (`cycle`): a failure or an aborted
   * attempt, a result that is no longer current, a disabled successor, a run whose end admits
   * waiting runs.
   */
  async advance(completions: Completion[], opts: ClaimOptions): Promise<ClaimedWork[] | null> {
    if (completions.length === 0 || completions.some((c) => c.outcome.status !== 'succeeded')) return null;
    const input: AdvanceInput = {
      worker: opts.workerId,
      leaseMs: opts.leaseMs,
      capacity: Math.max(0, opts.capacity),
      cap: opts.tenantCap,
      completions: [],
      artifacts: [],
    };
    completions.forEach((c, n) => input.completions.push({ ...successInput(c, input.artifacts), ord: n + 1 }));
    return this.unlessRefused(() => this.engine.advance(this.sys, input), opts);
  }

  /** The work of an engine statement that commits on its own, or null when it refused (OR001), having written nothing. */
  private async unlessRefused(
    statement: () => Promise<AdvanceRow[]>,
    opts: ClaimOptions,
  ): Promise<ClaimedWork[] | null> {
    let rows;
    try {
      rows = await statement();
    } catch (e) {
      if ((e as { code?: string }).code === 'OR001') return null;
      throw e;
    }
    return this.committedWork(rows, opts);
  }

  /**
   * A chain in one statement and one commit (ordo_engine_chain): `head`, a claimed step's
   * successful result, then the results of the steps the worker ran after it before that result
   * committed (`links`, in order, each the next step of a linear chain; see WorkerService). Written
   * as one hop per result would write them; the last link's successors are dispatched to this
   * worker up to `opts.capacity`; `ahead`, the step the worker still runs after the last link, among
   * them with the traceparent it runs under. Returns null, having written nothing, when the chain does not
   * hold in the run (a link is not the next step, the run is no longer running, the result is
   * fenced out) or needs the general transaction; the head is then reported alone.
   */
  async chain(
    head: Completion,
    links: ChainLink[],
    opts: ClaimOptions,
    ahead?: { stepId: string; traceparent: string },
  ): Promise<ClaimedWork[] | null> {
    if (head.outcome.status !== 'succeeded' || (links.length === 0 && !ahead)) return null;
    const artifacts: AdvanceInput['artifacts'] = [];
    const input: ChainInput = {
      worker: opts.workerId,
      leaseMs: opts.leaseMs,
      capacity: Math.max(0, opts.capacity),
      cap: opts.tenantCap,
      completions: [{ ...successInput(head, artifacts), ord: 1 }],
      links: [],
      artifacts,
      ...(ahead ? { ahead: { s: ahead.stepId, tp: ahead.traceparent } } : {}),
    };
    for (const l of links) {
      if (l.completion.outcome.status !== 'succeeded') return null;
      const { s, o, oh, lh, sa, fa } = successInput(l.completion, artifacts);
      input.links.push({ s, o, oh, lh, sa, fa, pl: l.plugin, cf: l.config, tp: l.traceparent });
    }
    return this.unlessRefused(() => this.engine.chain(this.sys, input), opts);
  }

  /** The definition of a DAG version, as published (for the worker's chains; versions never change). */
  dagDefinition(tenantId: string, dagId: string, version: number): Promise<unknown> {
    return this.engine.dagDefinition(this.sys, tenantId, dagId, version);
  }

  private async applyCompletions(
    tx: SystemTx,
    ctx: CycleContext,
    completions: Completion[],
    stepStates: StepState[],
  ): Promise<void> {
    const states = new Map(stepStates.map((s) => [`${s.tenant_id}/${s.run_id}/${s.step_id}`, s]));
    const outcomes: Outcome[] = [];
    const released: (StepKey & { epoch: number })[] = [];
    const aborted: Parameters<EngineRepository['finishAttempts']>[1] = [];
    for (const c of completions) {
      const b = ctx.books.get(c.tenantId, c.runId);
      const st = states.get(key3(c));
      released.push({ tenantId: c.tenantId, runId: c.runId, stepId: c.stepId, epoch: c.epoch });
      ctx.freed.add(c.tenantId);
      if (!b || !st) continue;
      const current = st.status === 'running' && st.epoch === c.epoch;
      if (c.outcome.status === 'aborted' && current && ctx.books.isActive(b)) {
        // Stopped without its run being cancelled (e.g. the process is shutting down): a retryable failure.
        outcomes.push({
          ...pick(c),
          attempt: c.attempt,
          epoch: c.epoch,
          kind: 'failed',
          error: { code: 'ABORTED', message: 'the attempt was stopped before it finished', retryable: true },
          logs: c.outcome.logs,
          startedAt: c.startedAt,
          finishedAt: c.finishedAt,
          actor: c.workerId,
        });
        continue;
      }
      if (c.outcome.status === 'aborted' || !current) {
        aborted.push({
          ...pick(c),
          attempt: c.attempt,
          epoch: c.epoch,
          status: 'cancelled',
          error: c.outcome.status === 'failed' ? c.outcome.error : null,
          outputsHash: null,
          logsHash: null,
          startedAt: c.startedAt,
          finishedAt: c.finishedAt,
        });
        if (!current && st.status !== 'cancelled') {
          // A fenced-out result (its lease expired and the step moved on): recorded, never applied.
          ctx.books.event(b, {
            type: 'step.result_rejected',
            stepId: c.stepId,
            attempt: c.attempt,
            actor: c.workerId,
            data: { epoch: c.epoch, currentEpoch: st.epoch, stepStatus: st.status, reported: c.outcome.status },
          });
        }
        continue;
      }
      outcomes.push({
        ...pick(c),
        attempt: c.attempt,
        epoch: c.epoch,
        kind: c.outcome.status,
        outputs: c.outcome.status === 'succeeded' ? c.outcome.outputs : undefined,
        logs: c.outcome.logs,
        error: c.outcome.status === 'failed' ? c.outcome.error : undefined,
        startedAt: c.startedAt,
        finishedAt: c.finishedAt,
        actor: c.workerId,
      });
    }
    await this.applyOutcomes(tx, ctx, outcomes, new Map([...states].map(([k, s]) => [k, s.spec as StepSpec])), {
      aborted,
      released,
    });
  }

  /** Applies current (not fenced-out) outcomes of running attempts. */
  private async applyOutcomes(
    tx: SystemTx,
    ctx: CycleContext,
    outcomes: Outcome[],
    specs: Map<string, StepSpec>,
    extra: { aborted: FinishAttempt[]; released: (StepKey & { epoch: number })[] } = { aborted: [], released: [] },
  ): Promise<void> {
    const attempts: Parameters<EngineRepository['finishAttempts']>[1] = [];
    const stepWrites: Parameters<EngineRepository['setSteps']>[1] = [];
    const failed: StepKey[] = [];
    const done: StepKey[] = [];
    for (const o of outcomes) {
      const b = ctx.books.get(o.tenantId, o.runId)!;
      const spec = specs.get(key3(o));
      const logsHash =
        o.logs && o.logs.length > 0
          ? ctx.artifact(jsonArtifact(o.tenantId, o.logs, 'application/x-ordo-log+json'))
          : null;
      if (o.kind === 'succeeded') {
        const art = jsonArtifact(o.tenantId, o.outputs ?? {});
        ctx.artifact(art);
        attempts.push({
          ...pick(o),
          attempt: o.attempt,
          epoch: o.epoch,
          status: 'succeeded',
          error: null,
          outputsHash: art.sha256,
          logsHash,
          startedAt: o.startedAt ?? null,
          finishedAt: o.finishedAt ?? null,
        });
        stepWrites.push({
          ...pick(o),
          from: ['running'],
          to: 'succeeded',
          outputs: Buffer.byteLength(art.json) <= INLINE_OUTPUTS_BYTES ? (o.outputs ?? {}) : null,
          outputsHash: art.sha256,
          logsHash,
          terminal: true,
        });
        ctx.books.event(b, {
          type: 'step.succeeded',
          stepId: o.stepId,
          attempt: o.attempt,
          actor: o.actor,
          data: { outputsHash: art.sha256 },
        });
        b.stepsRemaining -= 1;
        b.dirty = true;
        done.push(pick(o));
        continue;
      }
      const error: PluginError = o.error ?? {
        code: 'LEASE_EXPIRED',
        message: 'the worker stopped heartbeating',
        retryable: true,
      };
      attempts.push({
        ...pick(o),
        attempt: o.attempt,
        epoch: o.epoch,
        status: o.kind === 'orphaned' ? 'orphaned' : 'failed',
        error,
        outputsHash: null,
        logsHash,
        startedAt: o.startedAt ?? null,
        finishedAt: o.finishedAt ?? null,
      });
      let from = 'running';
      if (o.kind === 'orphaned') {
        stepWrites.push({ ...pick(o), from: ['running'], to: 'orphaned', error, terminal: false });
        ctx.books.event(b, {
          type: 'step.orphaned',
          stepId: o.stepId,
          attempt: o.attempt,
          actor: o.actor,
          data: { epoch: o.epoch },
        });
        from = 'orphaned';
      }
      const policy = spec?.retry ?? null;
      const retriesUsed = o.attempt - 1;
      if (error.retryable && policy && retriesUsed < policy.maxRetries && ctx.books.isActive(b)) {
        const delay = backoffMs(policy, retriesUsed + 1);
        stepWrites.push({ ...pick(o), from: [from], to: 'retrying', error, terminal: false });
        ctx.books.event(b, {
          type: 'step.retrying',
          stepId: o.stepId,
          attempt: o.attempt,
          actor: 'engine',
          data: { error: { ...error }, retryInMs: delay, nextAttempt: o.attempt + 1 },
        });
        ctx.jobs.push({
          payload: { tenantId: o.tenantId, runId: o.runId, stepId: o.stepId, attempt: o.attempt },
          runAt: new Date(Date.now() + delay),
        });
      } else {
        stepWrites.push({ ...pick(o), from: [from], to: 'failed', reason: error.code, error, terminal: true });
        ctx.books.event(b, {
          type: 'step.failed',
          stepId: o.stepId,
          attempt: o.attempt,
          actor: 'engine',
          data: { error: { ...error } },
        });
        b.stepsRemaining -= 1;
        b.stepsFailed += 1;
        b.dirty = true;
        failed.push(pick(o));
      }
    }
    // Orphaned steps take two transitions (running → orphaned → retrying | failed): the first goes ahead alone.
    await this.expectWritten(
      tx,
      stepWrites.filter((w) => w.to === 'orphaned'),
    );
    const rest = stepWrites.filter((w) => w.to !== 'orphaned');
    // Results and the first wave of their successors' readiness go in one statement.
    const { written, ready } = await this.engine.completeBatch(tx, {
      attempts: [...extra.aborted, ...attempts],
      steps: rest,
      released: extra.released,
      artifacts: ctx.artifacts.splice(0),
      done,
    });
    this.checkWritten(rest, written);
    await this.skipDownstreamOf(tx, ctx, failed);
    await this.release(tx, ctx, ready);
  }

  /** Writes step transitions; a refused one (not in an allowed source state) is logged and aborts the transaction. */
  private async expectWritten(tx: SystemTx, writes: SetStep[]): Promise<void> {
    if (writes.length === 0) return;
    this.checkWritten(writes, await this.engine.setSteps(tx, writes));
  }

  private checkWritten(
    writes: { tenantId: string; runId: string; stepId: string; to?: string; from?: string[] }[],
    done: StepKey[],
  ): void {
    const ok = new Set(done.map(key3));
    const refused = writes.filter((w) => !ok.has(key3(w)));
    if (refused.length > 0) {
      this.log.error(
        { refused: refused.map((w) => ({ ...pick(w), to: w.to, from: w.from })) },
        'illegal step transition refused',
      );
      throw new Error(`illegal step transition refused for ${refused.map(key3).join(', ')}`);
    }
  }

  /** Dependents of failed steps will never run: skip them (upstream_failed). */
  private async skipDownstreamOf(tx: SystemTx, ctx: CycleContext, failed: StepKey[]): Promise<void> {
    const down = await this.engine.pendingDescendants(tx, failed);
    if (down.length === 0) return;
    await this.expectWritten(
      tx,
      down.map((d) => ({ ...d, from: ['pending'], to: 'skipped', reason: 'upstream_failed', terminal: true })),
    );
    for (const d of down) {
      const b = ctx.books.get(d.tenantId, d.runId)!;
      ctx.books.event(b, {
        type: 'step.skipped',
        stepId: d.stepId,
        actor: 'engine',
        data: { reason: 'upstream_failed' },
      });
      b.stepsRemaining -= 1;
      b.dirty = true;
    }
  }

  /** Counts finished steps off their dependents; queues the ones now ready (skipping disabled ones, which count as done). */
  private async release(tx: SystemTx, ctx: CycleContext, firstWave: ReadyStep[]): Promise<void> {
    let ready = firstWave;
    while (ready.length > 0) {
      ready.sort((a, b) =>
        a.tenant_id + a.run_id < b.tenant_id + b.run_id
          ? -1
          : a.tenant_id + a.run_id > b.tenant_id + b.run_id
            ? 1
            : a.topo_index - b.topo_index,
      );
      const skip = ready
        .filter((r) => r.disabled)
        .map((r) => ({ tenantId: r.tenant_id, runId: r.run_id, stepId: r.step_id }));
      await this.expectWritten(
        tx,
        skip.map((k) => ({ ...k, from: ['pending'], to: 'skipped', reason: 'disabled', terminal: true })),
      );
      for (const k of skip) {
        const b = ctx.books.get(k.tenantId, k.runId)!;
        ctx.books.event(b, { type: 'step.skipped', stepId: k.stepId, actor: 'engine', data: { reason: 'disabled' } });
        b.stepsRemaining -= 1;
      }
      for (const r of ready.filter((x) => x.queued))
        ctx.books.event(ctx.books.get(r.tenant_id, r.run_id)!, {
          type: 'step.queued',
          stepId: r.step_id,
          actor: 'engine',
        });
      // Disabled steps count as done for their dependents: the next wave.
      ready = await this.engine.releaseAndQueue(tx, skip);
    }
  }

  /** Loads run inputs and upstream outputs for the claimed steps that use them (templated config, or a plugin that takes run data). */
  private async fillTemplateScope(tx: SystemTx, work: ClaimedWork[]): Promise<void> {
    const templated = work.filter((w) => w.needsData);
    if (templated.length === 0) return;
    const needOutputs = templated.flatMap((w) =>
      (w.dependsOn ?? []).map((dep) => ({ tenantId: w.tenantId, runId: w.runId, stepId: dep })),
    );
    const inputs = new Map(
      (await this.engine.runInputs(tx, uniqRuns(templated))).map((r) => [
        runKey(r.tenant_id, r.run_id),
        r.inputs as JsonValue,
      ]),
    );
    const outs = await this.engine.outputsOf(tx, needOutputs);
    const large = outs
      .filter((o) => o.outputs === null && o.outputs_hash !== null)
      .map((o) => ({ tenantId: o.tenant_id, sha256: o.outputs_hash! }));
    const bodies = await this.artifacts.jsonBodies(tx, large);
    const byRun = new Map<string, Record<string, { outputs: JsonValue }>>();
    for (const o of outs) {
      const k = runKey(o.tenant_id, o.run_id);
      const outputs = (o.outputs ?? bodies.get(`${o.tenant_id}/${o.outputs_hash}`) ?? {}) as JsonValue;
      byRun.set(k, { ...(byRun.get(k) ?? {}), [o.step_id]: { outputs } });
    }
    for (const w of templated) {
      w.inputs = inputs.get(runKey(w.tenantId, w.runId)) ?? {};
      w.upstream = byRun.get(runKey(w.tenantId, w.runId)) ?? {};
    }
  }

  /** Ends runs with no step left, then writes artifacts, jobs, events and run rows, and wakes the workers for freed slots. */
  private async flush(tx: SystemTx, ctx: CycleContext, books: RunBooks): Promise<void> {
    const ending = books.all().filter((b) => b.stepsRemaining <= 0 && books.isActive(b));
    if (ending.length > 0) {
      const hashes = await this.runs.stepOutputHashes(
        tx,
        ending.map((b) => ({ tenantId: b.row.tenant_id, runId: b.row.run_id })),
      );
      const byRun = new Map<string, Record<string, string | null>>();
      for (const h of hashes) {
        const k = runKey(h.tenant_id, h.run_id);
        byRun.set(k, { ...(byRun.get(k) ?? {}), [h.step_id]: h.outputs_hash });
      }
      for (const b of ending) {
        b.outputsHash = canonicalHash(byRun.get(runKey(b.row.tenant_id, b.row.run_id)) ?? {});
        books.transition(b, b.stepsFailed > 0 ? 'failed' : 'succeeded', 'engine', { outputsHash: b.outputsHash });
      }
      await admitWaitingRuns(tx, this.runs, books, ending);
    }
    if (ctx.artifacts.length > 0) await this.artifacts.insertMany(tx, ctx.artifacts);
    for (const j of ctx.jobs) {
      const spec = JOBS['ordo.engine.retry_step'];
      await this.engine.addJob(tx, 'ordo.engine.retry_step', j.payload, {
        runAt: j.runAt,
        jobKey: spec.jobKey(j.payload),
        maxAttempts: spec.maxAttempts,
      });
    }
    await this.runs.writeBooks(
      tx,
      books.events(),
      books.updates(),
      [...ctx.freed],
      ending.map((b) => b.row.run_id),
    );
  }

  /**
   * A claim that never waits for another transaction (tenants and runs locked elsewhere are left
   * out): while a worker's turn applies a large batch, a step of another tenant that became ready
   * is claimed at once instead of after that batch commits.
   */
  async claimNow(opts: SideClaimOptions): Promise<ClaimedWork[]> {
    return this.claimFromQueue(opts, true);
  }

  /** Expired leases: the attempts become orphaned and are retried, or fail when no retry is left. */
  async reap(limit = 100): Promise<number> {
    const committed: { books?: RunBooks } = {};
    const reaped = await this.withSystem(async (tx) => {
      const leases = await this.engine.expiredLeases(tx, limit);
      if (leases.length === 0) return 0;
      // Runs another transaction holds (a worker reporting that very step, a cancel) are left for
      // the next sweep: waiting for them while holding the leases' items could deadlock.
      const books = (committed.books = new RunBooks(
        await this.runs.lockRuns(tx, uniqRuns(leases.map((e) => ({ tenantId: e.tenant_id, runId: e.run_id }))), {
          skipLocked: true,
        }),
      ));
      const expired = leases.filter((e) => books.get(e.tenant_id, e.run_id));
      if (expired.length === 0) return 0;
      const ctx = new CycleContext(books);
      const keys = expired.map((e) => ({ tenantId: e.tenant_id, runId: e.run_id, stepId: e.step_id }));
      const states = new Map(
        (await this.engine.stepStates(tx, keys)).map((s) => [`${s.tenant_id}/${s.run_id}/${s.step_id}`, s]),
      );
      const outcomes: Outcome[] = [];
      for (const e of expired) {
        const st = states.get(`${e.tenant_id}/${e.run_id}/${e.step_id}`);
        ctx.freed.add(e.tenant_id);
        if (!st || st.status !== 'running' || st.epoch !== e.epoch) continue;
        outcomes.push({
          tenantId: e.tenant_id,
          runId: e.run_id,
          stepId: e.step_id,
          attempt: st.attempts,
          epoch: e.epoch,
          kind: 'orphaned',
          actor: 'reaper',
        });
      }
      await this.engine.deleteItems(
        tx,
        expired.map((e) => ({ tenantId: e.tenant_id, id: e.id })),
      );
      await this.applyOutcomes(tx, ctx, outcomes, new Map([...states].map(([k, s]) => [k, s.spec as StepSpec])));
      // A retried orphan re-enters the queue when its backoff job fires; nothing else to claim here.
      await this.flush(tx, ctx, books);
      return outcomes.length;
    });
    if (committed.books) observe(committed.books);
    return reaped;
  }

  /** A retry's backoff elapsed: the step (still retrying at that attempt) is queued again. */
  async requeue(p: JobPayload<'ordo.engine.retry_step'>): Promise<void> {
    await this.withSystem(async (tx) => {
      const books = new RunBooks(await this.runs.lockRuns(tx, [{ tenantId: p.tenantId, runId: p.runId }]));
      const b = books.get(p.tenantId, p.runId);
      if (!b || !books.isActive(b)) return;
      const [st] = await this.engine.stepStates(tx, [p]);
      if (!st || st.status !== 'retrying' || st.attempts !== p.attempt) return;
      await this.expectWritten(tx, [{ ...pick(p), from: ['retrying'], to: 'queued', terminal: false, queued: true }]);
      books.event(b, {
        type: 'step.queued',
        stepId: p.stepId,
        attempt: p.attempt + 1,
        actor: 'engine',
        data: { retry: p.attempt },
      });
      await this.runs.enqueue(tx, [pick(p)]);
      await this.runs.insertEvents(tx, books.events());
      await this.runs.updateRunBooks(tx, books.updates());
    });
  }

  /** Extends this worker's leases; returns the steps it still holds. */
  async heartbeat(workerId: string, items: (StepKey & { epoch: number })[], leaseMs: number): Promise<StepKey[]> {
    if (items.length === 0) return [];
    return this.withSystem((tx) => this.engine.heartbeat(tx, workerId, items, leaseMs));
  }
}

/** Per-transaction accumulators: artifacts, jobs and the tenants whose leases were released, written once at the end. */
class CycleContext {
  readonly artifacts: NewArtifact[] = [];
  readonly jobs: { payload: JobPayload<'ordo.engine.retry_step'>; runAt: Date }[] = [];
  readonly freed = new Set<string>();
  constructor(readonly books: RunBooks) {}

  /** Stores `a` with the transaction's other artifacts, once however many results have its content. */
  artifact(a: NewArtifact): string {
    addOnce(this.artifacts, a, (x) => x.tenantId === a.tenantId && x.sha256 === a.sha256);
    return a.sha256;
  }
}

function pick(k: StepKey): StepKey {
  return { tenantId: k.tenantId, runId: k.runId, stepId: k.stepId };
}

function uniqRuns(keys: { tenantId: string; runId: string }[]): { tenantId: string; runId: string }[] {
  const m = new Map(keys.map((k) => [runKey(k.tenantId, k.runId), { tenantId: k.tenantId, runId: k.runId }]));
  return [...m.values()];
}

/** Metrics and run spans for what a committed engine transaction did (finished runs, retries). */
function observe(books: RunBooks): void {
  observeCommittedEvents(
    books.events(),
    (tenantId, runId) => {
      const b = books.get(tenantId, runId);
      return b && { dagId: b.row.dag_id, traceId: b.row.trace_id, startedAt: b.row.started_at };
    },
    books.now,
  );
}

/** Metrics and run spans for the events an engine statement committed (ordo_engine_advance, ordo_engine_claim). */
function observeRows(rows: AdvanceRow[]): void {
  const events = rows.flatMap((r) => (r.kind === 'e' ? [r.item] : []));
  if (events.length === 0) return;
  const runs = new Map(events.map((e) => [runKey(e.tenantId, e.runId), e]));
  observeCommittedEvents(
    events,
    (tenantId, runId) => {
      const e = runs.get(runKey(tenantId, runId));
      return e && { dagId: e.dagId, traceId: e.traceId, startedAt: e.startedAt ? new Date(e.startedAt) : null };
    },
    new Date(),
  );
}

/** A claim beside the worker's turn: leaving out the tenants that turn serves, or only for some tenants. */
export type SideClaimOptions = ClaimOptions & { excludeTenants?: string[]; onlyTenants?: string[] };

function claimInput(opts: ClaimOptions): ClaimInput {
  return { worker: opts.workerId, leaseMs: opts.leaseMs, capacity: Math.max(0, opts.capacity), cap: opts.tenantCap };
}

/** Appends `item` to one statement's artifacts unless `same` finds it there (a few hundred at most). */
function addOnce<T>(list: T[], item: T, same: (x: T) => boolean): void {
  if (!list.some(same)) list.push(item);
}

/**
 * A successful result as the hop, the batch and the chain functions take it; its artifacts added to
 * `artifacts` unless the statement stores them already (the same content of the same tenant, as
 * the outputs of a chain's steps often are).
 */
function successInput(
  c: Completion,
  artifacts: AdvanceInput['artifacts'],
): Omit<AdvanceInput['completions'][number], 'ord'> {
  const out = c.outcome as { status: 'succeeded'; outputs: JsonObject; logs: StepLogLine[] };
  const add = (a: NewArtifact) =>
    addOnce(
      artifacts,
      { t: a.tenantId, h: a.sha256, m: a.mediaType, b: a.json },
      (x) => x.t === a.tenantId && x.h === a.sha256,
    );
  const art = jsonArtifact(c.tenantId, out.outputs ?? {});
  add(art);
  let logsHash: string | null = null;
  if (out.logs.length > 0) {
    const logs = jsonArtifact(c.tenantId, out.logs, 'application/x-ordo-log+json');
    add(logs);
    logsHash = logs.sha256;
  }
  return {
    t: c.tenantId,
    r: c.runId,
    s: c.stepId,
    a: c.attempt,
    e: c.epoch,
    o: Buffer.byteLength(art.json) <= INLINE_OUTPUTS_BYTES ? (out.outputs ?? {}) : null,
    oh: art.sha256,
    lh: logsHash,
    sa: c.startedAt,
    fa: c.finishedAt,
  };
}
