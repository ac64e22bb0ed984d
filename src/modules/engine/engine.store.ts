import { Injectable, Logger, type OnApplicationShutdown } from '@nestjs/common';
import { sql } from 'kysely';
import { Database } from '../../core/database/database';
import { canonicalJson } from '../../core/json/canonical-json';
import type { SystemDb, SystemTx } from '../../core/database/handles';
import { preparedKysely } from '../../core/database/prepared';
import { recordDispatch } from '../../core/telemetry/metrics';
import { observeCommittedEvents } from '../../core/telemetry/run-observer';
import { jsonArtifact, type NewArtifact, ArtifactsRepository } from '../artifacts/artifacts.repository';
import type { JsonObject, JsonValue, PluginError, StepLogLine } from '../plugins/plugin';
import { isMapInstance } from '../flow/map-step';
import { runKey } from '../runs/run-book';
import type { StepSpec } from '../runs/run-plan';
import {
  EngineRepository,
  type AdvanceInput,
  type AdvanceRow,
  type ArtifactInput,
  type ChainInput,
  type ClaimInput,
  type ResultInput,
  type StepKey,
} from './engine.repository';
import type { JobPayload } from './jobs';
import { NotifyOutbox } from './notify-outbox';

/** Outputs up to this size (canonical JSON bytes) also stay inline on the step row. */
const INLINE_OUTPUTS_BYTES = 8 * 1024;

/** What a worker reports for an attempt it ran. */
export interface Completion extends StepKey {
  attempt: number;
  epoch: number;
  workerId: string;
  outcome:
    | { status: 'succeeded'; outputs: JsonObject; namedStatus?: string; logs: StepLogLine[] }
    | { status: 'failed'; error: PluginError; logs: StepLogLine[] }
    /** The attempt stopped because its run was cancelled (or its lease was lost): nothing to apply. */
    | { status: 'aborted'; logs: StepLogLine[] }
    /** The step ends skipped (its condition was false, or a constraint's `skip` action): `skip.reason` says why. */
    | { status: 'skipped'; skip: { reason: string } & JsonObject; logs: StepLogLine[] }
    /**
     * The step waits for a decision (see PluginResult), or for its map instances (`items`, one
     * each): handed back, holding no slot and no lease.
     */
    | {
        status: 'waiting';
        wait: { kind: string } & JsonObject;
        items?: JsonValue[];
        /** What the engine keeps beside the wait (a queue step's task). */
        data?: JsonObject;
        logs: StepLogLine[];
      };
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
  /** Outputs and status of the step's dependencies, by step id (only when `needsData`). */
  upstream: Record<string, { outputs: JsonValue; status?: string; namedStatus?: string | null }>;
  /** When it became ready (queued). */
  queuedAt: Date;
  /** Its config is templated or its plugin takes run data: inputs and upstream are loaded. */
  needsData: boolean;
  /** The step's dependencies (whose outputs are loaded when `needsData`). */
  dependsOn?: string[];
  /** It resumes an attempt that waited for its preconditions, which a check found holding. */
  resumed?: boolean;
}

/** What loading a run's data for a step reads (its run and dependencies) and fills (inputs, upstream). */
export type RunDataTarget = Pick<ClaimedWork, 'tenantId' | 'runId' | 'needsData' | 'dependsOn' | 'inputs' | 'upstream'>;

export interface ClaimOptions {
  workerId: string;
  capacity: number;
  leaseMs: number;
  /** The per-tenant cap of steps in flight (a tenant's plan may set its own). */
  tenantCap: number;
  /** While tenants share the engine: each tenant's cap is at most this times its fair-share weight. */
  sharedCap?: number;
  /** Whether a plugin wants the run's inputs and upstream outputs even without templates in its config. */
  receivesRunData?: (plugin: string) => boolean;
}

/**
 * Steps of one plugin dispatched by a result transaction to its caller, which runs them to their
 * results (never throwing) inside that transaction: see EngineStore.withResolve.
 */
export interface HandOver {
  plugin: string;
  opts: ClaimOptions;
  run: (work: ClaimedWork[]) => Promise<Completion[]>;
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

const isTemplated = (v: unknown): boolean => JSON.stringify(v).includes('${{');

/** ordo_engine_advance's input for `completions` reported under `opts`, with the maps and tasks they hand back. */
function advanceInput(completions: Completion[], opts: ClaimOptions): AdvanceInput {
  const artifacts: ArtifactInput[] = [];
  const input: AdvanceInput = {
    ...claimInput(opts),
    results: completions.map((c, n) => resultInput(c, artifacts, n + 1)),
    artifacts,
  };
  const maps = completions.flatMap((c) =>
    c.outcome.status === 'waiting' && c.outcome.items
      ? [{ tenant_id: c.tenantId, run_id: c.runId, step_id: c.stepId, epoch: c.epoch, items: c.outcome.items }]
      : [],
  );
  if (maps.length > 0) input.maps = maps;
  const tasks = completions.flatMap((c) =>
    c.outcome.status === 'waiting' && c.outcome.wait.kind === 'queue' && c.outcome.data
      ? [{ tenant_id: c.tenantId, run_id: c.runId, step_id: c.stepId, epoch: c.epoch, task: c.outcome.data }]
      : [],
  );
  if (tasks.length > 0) input.tasks = tasks;
  return input;
}

/**
 * The engine's statements. What results do (a batch of them: group commit), what a claim takes,
 * what a chain writes and what a retry's end queues are each one SQL function committed on its own
 * (db/functions/ordo_engine_*.sql), the only home of those rules: a crash at any point loses
 * nothing and applies nothing twice. This class encodes their inputs, hands the dispatched steps
 * to the worker with the data they template from, observes the committed events, and sends the
 * notifications after the commit.
 */
@Injectable()
export class EngineStore implements OnApplicationShutdown {
  private readonly log = new Logger('engine');
  /** The system handle with prepared (parse- and plan-once) statements. */
  private readonly sys: SystemDb;
  /** Notifications of committed engine statements, sent after their commit. */
  private readonly outbox: NotifyOutbox;
  /** Who in this process answers the notifications of a channel itself (see answerHere). */
  private readonly answerers = new Map<string, (payload: string) => boolean>();

  constructor(
    private readonly db: Database,
    private readonly engine: EngineRepository,
    private readonly artifacts: ArtifactsRepository,
  ) {
    // Plans follow the tables as they grow: custom plans for the statements sent from here, and the
    // engine functions' generic plans re-made when a table doubles (PlanRefresh).
    this.sys = preparedKysely(db.systemPool, {
      prefix: 'ordo_e_',
      refresh: db.planRefresh,
      named: db.preparedStatements,
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
   * Applies `completions` (ordo_engine_advance), then claims from the queue for the room their
   * successors left (ordo_engine_claim): with no completions, the claim alone.
   */
  async cycle(completions: Completion[], opts: ClaimOptions): Promise<ClaimedWork[]> {
    const advanced = completions.length > 0 ? await this.advance(completions, opts) : [];
    const room = opts.capacity - advanced.length;
    return room > 0 ? [...advanced, ...(await this.claimFromQueue({ ...opts, capacity: room }))] : advanced;
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
    this.outbox.add(
      rows.flatMap((r) => (r.kind === 'notify' && !this.answerers.get(r.item[0])?.(r.item[1]) ? [r.item] : [])),
    );
    observeRows(rows);
  }

  /**
   * The notifications on `channel` of the engine statements committed here go to `answer` instead
   * of the database, each time it takes one (returns true): for a wake-up whose work this process
   * does itself after the commit (and for every process: a dispatch assigns to workers wherever they
   * wait), so that neither this process nor the others listening do it again.
   */
  answerHere(channel: string, answer: (payload: string) => boolean): void {
    this.answerers.set(channel, answer);
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
      if (r.kind !== 'dispatch') continue;
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
        queuedAt: d.queued_at ? new Date(d.queued_at) : now,
        needsData:
          isTemplated(config) ||
          opts.receivesRunData?.(d.plugin) === true ||
          (d.spec as StepSpec).when !== undefined ||
          (d.spec as StepSpec).map !== undefined ||
          (d.spec as StepSpec).preconditions !== undefined,
        dependsOn: d.depends_on,
        ...(d.resumes === true ? { resumed: true } : {}),
      });
    }
    return work;
  }

  /**
   * What `completions` do, in one statement and one commit (ordo_engine_advance): applied,
   * retried, failed or refused as fenced out; their successors that become ready dispatched to this
   * worker (up to `opts.capacity`, under the tenant cap) or queued; runs with no step left ended.
   * A single success goes through ordo_engine_chain with no link, which looks its one run up by key.
   */
  async advance(completions: Completion[], opts: ClaimOptions): Promise<ClaimedWork[]> {
    if (completions.length === 0) return [];
    const one = completions.length === 1 ? completions[0].outcome : null;
    // (A map instance's end may end its map step: ordo_engine_advance's work, not a chain's.)
    if (one?.status === 'succeeded' && one.namedStatus === undefined && !isMapInstance(completions[0].stepId)) {
      const single = await this.chain(completions[0], [], opts);
      if (single) return single;
    }
    return this.committedWork(await this.engine.advance(this.sys, advanceInput(completions, opts)), opts);
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
    if (head.outcome.status !== 'succeeded' || head.outcome.namedStatus !== undefined) return null;
    const artifacts: ArtifactInput[] = [];
    const input: ChainInput = {
      ...claimInput(opts),
      head: resultInput(head, artifacts, 1),
      links: [],
      artifacts,
      ...(ahead ? { ahead: { step_id: ahead.stepId, traceparent: ahead.traceparent } } : {}),
    };
    for (const l of links) {
      if (l.completion.outcome.status !== 'succeeded') return null;
      const r = resultInput(l.completion, artifacts, 0);
      input.links.push({
        step_id: r.step_id,
        outputs: r.outputs,
        outputs_hash: r.outputs_hash!,
        logs_hash: r.logs_hash,
        started_at: r.started_at,
        finished_at: r.finished_at,
        plugin: l.plugin,
        config: l.config,
        traceparent: l.traceparent,
      });
    }
    return this.unlessRefused(() => this.engine.chain(this.sys, input), opts);
  }

  /**
   * Applies `result` to a step that waits at its epoch (ordo_engine_resolve), after the event of
   * the decision that produced it. False, having written nothing, when the step no longer waits.
   */
  async resolve(result: Completion, decided: { type: string; data: JsonObject }): Promise<boolean> {
    const artifacts: ArtifactInput[] = [];
    const rows = await this.engine.resolve(this.sys, {
      result: resultInput(result, artifacts, 1),
      artifacts,
      decided: { type: decided.type, data: canonicalJson(decided.data) },
    });
    if (rows.some((r) => (r.kind as string) === 'refused')) return false;
    this.committed(rows);
    return true;
  }

  /**
   * Runs `fn` in a system transaction whose `resolve` applies results to waiting steps as `resolve`
   * does, inside it (so a caller's own writes and locks commit with them); what they committed is
   * announced after the commit.
   */
  async withResolve<T>(
    fn: (
      tx: SystemTx,
      resolve: (result: Completion, decided: { type: string; data: JsonObject }) => Promise<boolean>,
      resolveAll: (
        items: { result: Completion; decided: { type: string; data: JsonObject } }[],
        handOver?: HandOver,
      ) => Promise<boolean[]>,
    ) => Promise<T>,
  ): Promise<T> {
    const done: AdvanceRow[] = [];
    const resolveAll = async (
      items: { result: Completion; decided: { type: string; data: JsonObject } }[],
      handOver?: HandOver,
    ) => {
      if (items.length === 0) return [];
      const artifacts: ArtifactInput[] = [];
      const rows = await this.engine.resolve(tx!, {
        items: items.map((i, n) => ({
          result: resultInput(i.result, artifacts, n + 1),
          decided: { type: i.decided.type, data: canonicalJson(i.decided.data) },
        })),
        artifacts,
        ...(handOver && { handOver: { ...claimInput(handOver.opts), only: handOver.plugin } }),
      });
      const refused = new Set(
        rows
          .filter((r) => (r.kind as string) === 'refused')
          .map((r) => {
            const k = r.item as unknown as { tenant_id: string; run_id: string; step_id: string };
            return JSON.stringify([k.tenant_id, k.run_id, k.step_id]);
          }),
      );
      done.push(...rows.filter((r) => (r.kind as string) !== 'refused'));
      if (handOver) {
        // The steps dispatched here are made into their tasks and handed back before the commit.
        const work = this.dispatched(rows, handOver.opts);
        if (work.length > 0) {
          if (work.some((w) => w.needsData)) await this.fillTemplateScope(tx!, work);
          const completions = await handOver.run(work);
          done.push(...(await this.engine.advance(tx!, advanceInput(completions, { ...handOver.opts, capacity: 0 }))));
        }
      }
      return items.map((i) => !refused.has(JSON.stringify([i.result.tenantId, i.result.runId, i.result.stepId])));
    };
    let tx: SystemTx | undefined;
    const out = await this.withSystem((t) => {
      tx = t;
      return fn(t, async (result, decided) => (await resolveAll([{ result, decided }]))[0], resolveAll);
    });
    this.committed(done);
    return out;
  }

  /** The definition of a DAG version, as published (for the worker's chains; versions never change). */
  dagDefinition(tenantId: string, dagId: string, version: number): Promise<unknown> {
    return this.engine.dagDefinition(this.sys, tenantId, dagId, version);
  }

  /** Loads the run inputs and upstream outputs of `targets` (as a claim does for the steps it dispatches). */
  async loadRunData(targets: RunDataTarget[]): Promise<void> {
    await this.withSystem((tx) => this.fillTemplateScope(tx, targets));
  }

  /** Loads run inputs and upstream outputs for the claimed steps that use them (templated config, or a plugin that takes run data). */
  private async fillTemplateScope(tx: SystemTx, work: RunDataTarget[]): Promise<void> {
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
      .filter((o) => o.status === 'succeeded' && o.outputs === null && o.outputs_hash !== null)
      .map((o) => ({ tenantId: o.tenant_id, sha256: o.outputs_hash! }));
    const bodies = await this.artifacts.jsonBodies(tx, large);
    const byRun = new Map<string, Record<string, { outputs: JsonValue; status: string; namedStatus: string | null }>>();
    for (const o of outs) {
      const k = runKey(o.tenant_id, o.run_id);
      const outputs = (
        o.status === 'succeeded' ? (o.outputs ?? bodies.get(`${o.tenant_id}/${o.outputs_hash}`) ?? {}) : {}
      ) as JsonValue;
      byRun.set(k, {
        ...(byRun.get(k) ?? {}),
        [o.step_id]: { outputs, status: o.status, namedStatus: o.named_status },
      });
    }
    for (const w of templated) {
      w.inputs = inputs.get(runKey(w.tenantId, w.runId)) ?? {};
      w.upstream = byRun.get(runKey(w.tenantId, w.runId)) ?? {};
    }
  }

  /**
   * A claim that never waits for another transaction (tenants and runs locked elsewhere are left
   * out): while a worker's turn applies a large batch, a step of another tenant that became ready
   * is claimed at once instead of after that batch commits.
   */
  async claimNow(opts: SideClaimOptions): Promise<ClaimedWork[]> {
    return this.claimFromQueue(opts, true);
  }

  /**
   * Expired leases, reported as orphaned results (ordo_engine_advance): each attempt whose lease is
   * still expired becomes orphaned and is retried, or fails when no retry is left. Returns the
   * leases reported.
   */
  async reap(limit = 100): Promise<number> {
    const leases = await this.engine.expiredLeases(this.sys, limit);
    if (leases.length === 0) return 0;
    const input: AdvanceInput = {
      worker: 'reaper',
      leaseMs: 0,
      capacity: 0,
      cap: 0,
      results: leases.map((l, n) => ({
        tenant_id: l.tenant_id,
        run_id: l.run_id,
        step_id: l.step_id,
        attempt: l.attempt,
        epoch: l.epoch,
        status: 'orphaned',
        outputs: null,
        outputs_hash: null,
        logs_hash: null,
        error: null,
        started_at: null,
        finished_at: null,
        actor: 'reaper',
        ord: n + 1,
      })),
      artifacts: [],
    };
    this.committed(await this.engine.advance(this.sys, input));
    return leases.length;
  }

  /** A retry's backoff elapsed: the step (still retrying at that attempt) is queued again (ordo_engine_requeue). */
  async requeue(p: JobPayload<'ordo.engine.retry_step'>): Promise<void> {
    await sql`select ordo_engine_requeue(${p.tenantId}, ${p.runId}::uuid, ${p.stepId}, ${p.attempt})`.execute(this.sys);
  }

  /** A scheduled run's notBefore came: the run, still scheduled, is queued with its ready steps (ordo_start_scheduled). */
  async startScheduled(p: JobPayload<'ordo.engine.start_run'>): Promise<void> {
    await sql`select ordo_start_scheduled(${p.tenantId}, ${p.runId}::uuid)`.execute(this.sys);
  }

  /** Extends this worker's leases; returns the steps it still holds. */
  async heartbeat(workerId: string, items: (StepKey & { epoch: number })[], leaseMs: number): Promise<StepKey[]> {
    if (items.length === 0) return [];
    return this.withSystem((tx) => this.engine.heartbeat(tx, workerId, items, leaseMs));
  }
}

function uniqRuns(keys: { tenantId: string; runId: string }[]): { tenantId: string; runId: string }[] {
  const m = new Map(keys.map((k) => [runKey(k.tenantId, k.runId), { tenantId: k.tenantId, runId: k.runId }]));
  return [...m.values()];
}

/** Metrics and run spans for the events an engine statement committed (ordo_engine_advance, ordo_engine_claim). */
function observeRows(rows: AdvanceRow[]): void {
  const events = rows.flatMap((r) => (r.kind === 'event' ? [r.item] : []));
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

/** What every engine statement that dispatches is told of its worker: id, lease, room and caps. */
function claimInput(opts: ClaimOptions): Pick<ClaimInput, 'worker' | 'leaseMs' | 'capacity' | 'cap' | 'sharedCap'> {
  return {
    worker: opts.workerId,
    leaseMs: opts.leaseMs,
    capacity: Math.max(0, opts.capacity),
    cap: opts.tenantCap,
    ...(opts.sharedCap !== undefined && { sharedCap: opts.sharedCap }),
  };
}

/** Appends `item` to one statement's artifacts unless `same` finds it there (a few hundred at most). */
function addOnce<T>(list: T[], item: T, same: (x: T) => boolean): void {
  if (!list.some(same)) list.push(item);
}

/**
 * A result as the engine's functions take it (its place in the batch `ord`); its artifacts (outputs,
 * logs) added to `artifacts` unless the statement stores them already (the same content of the same
 * tenant, as the outputs of a chain's steps often are).
 */
function resultInput(c: Completion, artifacts: ArtifactInput[], ord: number): ResultInput {
  const add = (a: NewArtifact) =>
    addOnce(
      artifacts,
      { tenant_id: a.tenantId, sha256: a.sha256, media_type: a.mediaType, body: a.json },
      (x) => x.tenant_id === a.tenantId && x.sha256 === a.sha256,
    );
  const out = c.outcome;
  let logsHash: string | null = null;
  if (out.logs.length > 0) {
    const logs = jsonArtifact(c.tenantId, out.logs, 'application/x-ordo-log+json');
    add(logs);
    logsHash = logs.sha256;
  }
  let outputs: JsonObject | null = null;
  let outputsHash: string | null = null;
  if (out.status === 'succeeded') {
    const art = jsonArtifact(c.tenantId, out.outputs ?? {});
    add(art);
    outputsHash = art.sha256;
    outputs = Buffer.byteLength(art.json) <= INLINE_OUTPUTS_BYTES ? (out.outputs ?? {}) : null;
  }
  // A skipped result carries why in its error field (the step.skipped event's data).
  const error: ResultInput['error'] =
    out.status === 'failed'
      ? {
          code: out.error.code,
          message: out.error.message,
          retryable: out.error.retryable,
          ...(out.error.class !== undefined ? { class: out.error.class } : {}),
          ...(out.error.input !== undefined ? { input: out.error.input } : {}),
        }
      : out.status === 'skipped'
        ? out.skip
        : out.status === 'waiting'
          ? out.wait
          : null;
  return {
    tenant_id: c.tenantId,
    run_id: c.runId,
    step_id: c.stepId,
    attempt: c.attempt,
    epoch: c.epoch,
    status: out.status,
    outputs,
    outputs_hash: outputsHash,
    logs_hash: logsHash,
    error,
    started_at: c.startedAt,
    finished_at: c.finishedAt,
    actor: c.workerId,
    ord,
    named_status: out.status === 'succeeded' ? (out.namedStatus ?? null) : null,
  };
}
