import { Injectable, Optional } from '@nestjs/common';
import { randomUUID } from 'node:crypto';
import type { Kysely, Selectable } from 'kysely';
import { Database, tenantTransaction } from '../../core/database/database';
import type { Attempt, DB } from '../../core/database/db.generated';
import { isTenantStatement, tenantStatement, type TenantStatement, type TenantTx } from '../../core/database/handles';
import { preparedKysely } from '../../core/database/prepared';
import { badRequest, conflict, DomainError, notFound } from '../../core/errors/domain-error';
import { decodePageToken, encodePageToken } from '../../core/http/page-token';
import { newTraceId } from '../../core/http/trace';
import { canonicalHash } from '../../core/json/canonical-json';
import { observeCommittedEvents } from '../../core/telemetry/run-observer';
import type { DagDefinition } from '../dags/dag-definition';
import { DagsRepository, type DagVersionRecord } from '../dags/dags.repository';
import { compileInputSchema } from '../dags/input-schema';
import { DAG_STEP_PLUGIN } from '../dags/sub-dag-refs';
import { QUEUE_STEP_PLUGIN } from '../workers/worker-names';
import { quotaExceeded } from '../plans/quota-exceeded';
import { RunRateLimit, takeRuns } from '../plans/rate-limit-runs';
import type { JsonObject, JsonValue } from '../plugins/plugin';
import { RunBooks } from './run-book';
import { RunExplainService, type RunWaiting } from './run-explain.service';
import { chain, type ChainedEvent, type EventDraft } from './run-events';
import {
  DEFAULT_PRIORITY,
  descendants,
  planRun,
  withRunPriority,
  type PlannedStep,
  type QueuedStep,
  type ReusedOutputs,
} from './run-plan';
import type { AttemptDto, RunDto, RunListQuery, StepDto } from './runs.dto';
import { DagVersionCache, versionKey } from './dag-version-cache';
import {
  RunsRepository,
  type ExistingRun,
  type NewRun,
  type RunBookRow,
  type RunRow,
  type StepRow,
} from './runs.repository';
import { TERMINAL_RUN_STATES, type RunStatus } from './state-machine';

export interface CreateRunRequest {
  dagId: string;
  version?: number;
  inputs: unknown;
  runToken: string;
  requestedBy: string;
  /** 0-9, higher first in the tenant's ready queue (DEFAULT_PRIORITY when absent). */
  priority?: number;
  /** RFC 3339: a later time parks the run (scheduled) until then. */
  notBefore?: string;
}

/** How far ahead a run may be scheduled. */
const MAX_NOT_BEFORE_MS = 366 * 24 * 3600 * 1000;

export interface CreateRunResult {
  runId: string;
  created: boolean;
  status: string;
  traceId: string;
}

type CreateOutcome = { result: CreateRunResult } | { error: unknown };

interface Lineage {
  replayOf?: string;
  rerunOf?: string;
  rerunFromStep?: string;
  reuse?: ReusedOutputs;
  parent?: ParentStep;
}

/** The run and `dag` step that start a child run, and the child's depth (the parent's plus one). */
export interface ParentStep {
  runId: string;
  stepId: string;
  depth: number;
}

const isAfter = (v: unknown): v is { t: string; id: string } =>
  typeof v === 'object' &&
  v !== null &&
  typeof (v as { t: unknown }).t === 'string' &&
  typeof (v as { id: unknown }).id === 'string';

/** Runs: idempotent creation, reads, cancel, replay and rerun. Every change is a chained run_event. */
@Injectable()
export class RunsService {
  private readonly batcher = new CreationBatcher((tenantId, reqs) => this.createEach(tenantId, reqs));
  private readonly prepared: PreparedTenantTransactions;
  private readonly versions = new DagVersionCache();

  constructor(
    private readonly db: Database,
    private readonly repo: RunsRepository,
    private readonly dags: DagsRepository,
    // (Absent where a RunsService is built outside the application, which reads no run records.)
    @Optional() private readonly explainer?: RunExplainService,
    @Optional() private readonly runRate?: RunRateLimit,
  ) {
    this.prepared = new PreparedTenantTransactions(db);
  }

  /**
   * Creates a run, or returns the existing one for the same (dagId, runToken, inputs). Concurrent
   * calls for one tenant are written together (group commit, see CreationBatcher); each call still
   * gets its own answer and its own error.
   */
  async createRun(tenantId: string, req: CreateRunRequest): Promise<CreateRunResult> {
    checkSchedule(req);
    return takeRuns(this.runRate, tenantId, 1, () => this.batcher.submit(tenantId, req));
  }

  /**
   * Creates many runs in one transaction (a few statements whatever their number), all or nothing.
   * Each request is idempotent on (tenant, dagId, runToken, inputsHash): a repeated one returns the
   * existing run (created: false); the same token with other inputs is RUN_TOKEN_CONFLICT.
   */
  async createRuns(tenantId: string, reqs: CreateRunRequest[]): Promise<CreateRunResult[]> {
    reqs.forEach(checkSchedule);
    const out = await takeRuns(this.runRate, tenantId, reqs.length, () =>
      this.db.withTenant(tenantId, (tx) => this.createdInTx(tx, tenantId, reqs, {}, true)),
    );
    void this.db.planRefresh.committedRuns(out.filter((r) => r.created).length);
    return out;
  }

  /**
   * Creates the runs of independent requests in one transaction: a request refused for its own
   * reason (unknown DAG, invalid inputs, token conflict) gets its error while the others are
   * written. When the transaction itself fails, each request is tried again on its own.
   */
  private async createEach(tenantId: string, reqs: CreateRunRequest[]): Promise<CreateOutcome[]> {
    try {
      // DAG versions this process resolved before, none with a maxConcurrentRuns limit (whose slots
      // are counted in a transaction): one statement, committed on its own. A version that changed
      // meanwhile writes nothing, and the transaction below resolves it again.
      const known = this.versions.known(tenantId, reqs);
      let out: CreateOutcome[] | null = null;
      if (known) {
        const h = tenantStatement(this.prepared.handle, tenantId);
        out = await this.write(h, tenantId, reqs, known, new Map(), {}, false);
        if (!out) this.versions.forget(tenantId, reqs);
      }
      out ??= await this.prepared.withTenant(tenantId, (tx) => this.createInTx(tx, tenantId, reqs, {}, false));
      void this.db.planRefresh.committedRuns(out.filter((o) => 'result' in o && o.result.created).length);
      return out;
    } catch (e) {
      if (reqs.length === 1) return [{ error: e }];
      return Promise.all(reqs.map(async (r) => (await this.createEach(tenantId, [r]))[0]));
    }
  }

  /**
   * Resolves the DAG versions of `reqs` and counts the maxConcurrentRuns slots in `tx`, then plans
   * and writes the runs (see write). Should a version change between its lookup and the write, it
   * is looked up again.
   */
  private async createInTx(
    tx: TenantTx,
    tenantId: string,
    reqs: CreateRunRequest[],
    lineage: Lineage,
    allOrNothing: boolean,
  ): Promise<CreateOutcome[]> {
    for (let tries = 1; ; tries++) {
      const versions = new Map<string, DagVersionRecord | { error: unknown }>();
      for (const r of reqs) {
        const k = versionKey(r);
        if (versions.has(k)) continue;
        try {
          const v = await this.resolveVersion(tx, r.dagId, r.version);
          versions.set(k, v);
          this.versions.remember(tenantId, k, v);
        } catch (e) {
          if (allOrNothing || !(e instanceof DomainError)) throw e;
          versions.set(k, { error: e });
        }
      }
      // maxConcurrentRuns: slots left per DAG, counted under per-DAG advisory locks taken in DAG id
      // order (so concurrent creators agree and cannot deadlock on them).
      const slots = new Map<string, number>();
      const limited = [...versions.values()]
        .filter((v): v is DagVersionRecord => !('error' in v) && !!v.definition.constraints?.maxConcurrentRuns)
        .sort((a, b) => (a.dagId < b.dagId ? -1 : a.dagId > b.dagId ? 1 : 0));
      for (const v of limited) {
        const c = v.definition.constraints!.maxConcurrentRuns!;
        if (!slots.has(v.dagId)) slots.set(v.dagId, c.limit - (await this.repo.countActiveRuns(tx, v.dagId)));
      }
      const out = await this.write(tx, tenantId, reqs, versions, slots, lineage, allOrNothing);
      if (out) return out;
      if (tries >= 3) throw conflict('DAG_VERSION_CHANGED', 'the DAG version changed while the run was created; retry');
    }
  }

  /**
   * Plans the runs of `reqs` with their resolved `versions` (and the maxConcurrentRuns `slots` left
   * per DAG) and writes them in one statement, one outcome per request; null, having written
   * nothing, when a version is no longer the one to use. With `allOrNothing`, the first refusal is
   * thrown (the caller's transaction rolls back) and a request repeating an earlier one of the list
   * shares its answer; otherwise refusals are outcomes and a repeat is answered like a repeat in a
   * later call (created: false).
   */
  private async write(
    h: TenantTx | TenantStatement,
    tenantId: string,
    reqs: CreateRunRequest[],
    versions: Map<string, DagVersionRecord | { error: unknown }>,
    slots: Map<string, number>,
    lineage: Lineage,
    allOrNothing: boolean,
  ): Promise<CreateOutcome[] | null> {
    const outcomes: (CreateOutcome | undefined)[] = new Array(reqs.length);
    const refuse = (i: number, error: unknown) => {
      if (allOrNothing) throw error;
      outcomes[i] = { error };
    };
    const newRuns: NewRun[] = [];
    const steps: (PlannedStep & { runId: string })[] = [];
    const events: ChainedEvent[] = [];
    const queue: QueuedStep[] = [];
    const planned = new Map<string, { run: NewRun; steps: readonly PlannedStep[]; events: ChainedEvent[] }>();
    const now = new Date();
    // Index in `reqs` of the first request of each (dagId, runToken), with its inputs hash.
    const seenTokens = new Map<string, { hash: string; first: number }>();
    const runOf: (NewRun | undefined)[] = new Array(reqs.length);
    const repeatOf: (number | undefined)[] = new Array(reqs.length);
    for (let i = 0; i < reqs.length; i++) {
      const r = reqs[i];
      const v = versions.get(versionKey(r))!;
      if ('error' in v) {
        refuse(i, v.error);
        continue;
      }
      let inputs: JsonValue;
      let inputsHash: string;
      try {
        inputs = this.validateInputs(v.definition, r.inputs);
        inputsHash = canonicalHash(inputs);
      } catch (e) {
        if (!(e instanceof DomainError)) throw e;
        refuse(i, e);
        continue;
      }
      const tokenKey = `${r.dagId}\u0000${r.runToken}`;
      const prior = seenTokens.get(tokenKey);
      if (prior !== undefined && prior.hash !== inputsHash) {
        refuse(i, conflict('RUN_TOKEN_CONFLICT', `runToken ${r.runToken} was used with other inputs`));
        continue;
      }
      if (prior !== undefined) {
        repeatOf[i] = prior.first;
        continue;
      }
      seenTokens.set(tokenKey, { hash: inputsHash, first: i });
      const runId = randomUUID();
      const traceId = newTraceId();
      let plan = withRunPriority(planRun(v.definition, lineage.reuse), r.priority);
      let admission: 'admitted' | 'waiting' | 'skipped' = 'admitted';
      const limit = v.definition.constraints?.maxConcurrentRuns;
      // A notBefore still ahead parks the run (scheduled): nothing is queued until it is started.
      const notBefore = r.notBefore === undefined ? undefined : new Date(r.notBefore);
      const scheduled = notBefore !== undefined && notBefore.getTime() > now.getTime();
      if (scheduled && limit) {
        refuse(
          i,
          badRequest(
            'NOT_BEFORE_UNSUPPORTED',
            `DAG ${v.dagId} limits its concurrent runs (maxConcurrentRuns): it cannot be scheduled with notBefore`,
          ),
        );
        continue;
      }
      if (scheduled) plan = plan.map((s) => (s.status === 'queued' ? { ...s, status: 'pending' } : s));
      if (limit) {
        const left = slots.get(v.dagId)!;
        if (left > 0) slots.set(v.dagId, left - 1);
        else admission = limit.action === 'queue' ? 'waiting' : 'skipped';
      }
      if (admission === 'waiting') {
        // Waits for a slot: nothing is queued until the run is admitted (when another run of the DAG ends).
        plan = plan.map((s) => (s.status === 'queued' ? { ...s, status: 'pending' } : s));
      } else if (admission === 'skipped') {
        plan = plan.map((s) =>
          s.status === 'pending' || s.status === 'queued'
            ? { ...s, status: 'cancelled', reason: 'max_concurrent_runs' }
            : s,
        );
      }
      const remaining = plan.filter((s) => s.status === 'pending' || s.status === 'queued').length;
      const drafts: EventDraft[] = [
        {
          type: 'run.created',
          actor: r.requestedBy,
          data: {
            dagId: v.dagId,
            version: v.version,
            contentHash: v.contentHash,
            inputsHash,
            runToken: r.runToken,
            traceId,
            ...(r.priority !== undefined ? { priority: r.priority } : {}),
            ...(notBefore !== undefined ? { notBefore: notBefore.toISOString() } : {}),
            ...(lineage.replayOf ? { replayOf: lineage.replayOf } : {}),
            ...(lineage.rerunOf ? { rerunOf: lineage.rerunOf, rerunFromStep: lineage.rerunFromStep ?? null } : {}),
            ...(lineage.parent ? { parentRunId: lineage.parent.runId, parentStepId: lineage.parent.stepId } : {}),
          },
        },
        ...plan
          .filter((s) => s.status !== 'pending')
          .map((s): EventDraft => ({
            type: s.status === 'succeeded' ? 'step.reused' : `step.${s.status}`,
            stepId: s.stepId,
            actor: 'engine',
            data: s.reason ? { reason: s.reason } : s.fromRerun ? { outputsHash: s.outputsHash } : {},
          })),
      ];
      if (admission === 'waiting')
        drafts.push({ type: 'run.waiting', actor: 'engine', data: { reason: 'max_concurrent_runs' } });
      if (scheduled && remaining > 0)
        drafts.push({ type: 'run.scheduled', actor: 'engine', data: { notBefore: notBefore.toISOString() } });
      const finishedNow = remaining === 0;
      const endStatus = admission === 'skipped' ? 'cancelled' : 'succeeded';
      if (finishedNow)
        drafts.push({
          type: `run.${endStatus}`,
          actor: 'engine',
          data: admission === 'skipped' ? { reason: 'max_concurrent_runs' } : {},
        });
      const chained = chain(tenantId, runId, { seq: 0, hash: '' }, drafts, now);
      const run: NewRun = {
        runId,
        dagId: v.dagId,
        dagVersion: v.version,
        contentHash: v.contentHash,
        runToken: r.runToken,
        inputs: inputs,
        inputsHash,
        status: finishedNow ? endStatus : scheduled ? 'scheduled' : 'queued',
        reason: admission === 'skipped' ? 'max_concurrent_runs' : null,
        traceId,
        requestedBy: r.requestedBy,
        replayOf: lineage.replayOf ?? null,
        rerunOf: lineage.rerunOf ?? null,
        rerunFromStep: lineage.rerunFromStep ?? null,
        parentRunId: lineage.parent?.runId ?? null,
        parentStepId: lineage.parent?.stepId ?? null,
        depth: lineage.parent?.depth ?? 0,
        admitted: admission !== 'waiting',
        stepsTotal: plan.length,
        stepsRemaining: remaining,
        eventSeq: chained.length,
        eventHash: chained[chained.length - 1].hash,
        finished: finishedNow,
        priority: r.priority ?? DEFAULT_PRIORITY,
        notBefore: notBefore ?? null,
      };
      newRuns.push(run);
      runOf[i] = run;
      planned.set(runId, { run, steps: plan, events: chained });
    }
    // Runs, then only for those inserted their steps, events and queue items, in one statement.
    // Runs are inserted in (dagId, runToken) order, so concurrent creators of overlapping tokens cannot deadlock.
    for (const run of newRuns) {
      const p = planned.get(run.runId)!;
      for (const s of p.steps) {
        steps.push({ ...s, runId: run.runId });
        if (s.status === 'queued') queue.push({ runId: run.runId, stepId: s.stepId });
      }
      events.push(...p.events);
    }
    // The versions planned with, each checked by the write: a request that named none was planned
    // with the latest active one.
    const used = new Map<string, { dagId: string; version: number; latest: boolean }>();
    for (const [i, r] of reqs.entries()) {
      const run = runOf[i];
      if (run) used.set(versionKey(r), { dagId: run.dagId, version: run.dagVersion, latest: r.version === undefined });
    }
    const written = await this.repo.createRuns(h, {
      versions: [...used.values()],
      runs: newRuns.length > 1 ? [...newRuns].sort((a, b) => compareTokens(a, b)) : newRuns,
      steps,
      events,
      queue,
    });
    if (written.stale.length > 0) return null;
    // Requests whose token already had a run: same inputs → that run; other inputs → conflict.
    const existing = new Map<string, ExistingRun>(written.existing.map((x) => [`${x.dag_id}\u0000${x.run_token}`, x]));
    const missing = newRuns.filter(
      (r) =>
        !written.created.has(r.runId) &&
        !written.refused.has(r.runId) &&
        !existing.has(`${r.dagId}\u0000${r.runToken}`),
    );
    if (missing.length > 0) {
      // (A run of the same token committed by another transaction after this statement started.)
      if (isTenantStatement(h)) return null;
      const byDag = new Map<string, string[]>();
      for (const m of missing) {
        const tokens = byDag.get(m.dagId);
        if (tokens) tokens.push(m.runToken);
        else byDag.set(m.dagId, [m.runToken]);
      }
      for (const [dagId, tokens] of byDag)
        for (const row of await this.repo.findByTokens(h, dagId, tokens))
          existing.set(`${dagId}\u0000${row.run_token}`, row);
    }
    for (let i = 0; i < reqs.length; i++) {
      const mine = runOf[i];
      if (!mine) continue;
      if (written.created.has(mine.runId)) {
        outcomes[i] = { result: { runId: mine.runId, created: true, status: mine.status, traceId: mine.traceId } };
        continue;
      }
      const quota = written.refused.get(mine.runId);
      if (quota) {
        refuse(
          i,
          quotaExceeded(
            quota,
            `run not created: over the plan's ${quota.limit} (${quota.value}; current use ${quota.current})`,
          ),
        );
        continue;
      }
      const row = existing.get(`${mine.dagId}\u0000${mine.runToken}`);
      if (!row) throw new Error('run token neither inserted nor found');
      if (row.inputs_hash !== mine.inputsHash)
        refuse(i, conflict('RUN_TOKEN_CONFLICT', `runToken ${mine.runToken} was used with other inputs`));
      else outcomes[i] = { result: { runId: row.run_id, created: false, status: row.status, traceId: row.trace_id } };
    }
    return Array.from(outcomes, (o, i) => {
      if (o) return o;
      const first = outcomes[repeatOf[i]!]!;
      return 'error' in first || allOrNothing ? first : { result: { ...first.result, created: false } };
    });
  }

  /**
   * Starts the child run of a `dag` step (idempotent on its run token like any run), in a
   * transaction that holds the parent run: a parent that ended meanwhile starts no child
   * (PARENT_RUN_ENDED).
   */
  async createChild(tenantId: string, req: CreateRunRequest, parent: ParentStep): Promise<CreateRunResult> {
    return this.db.withTenant(tenantId, async (tx) => {
      const [p] = await this.repo.lockRuns(tx, [{ tenantId, runId: parent.runId }]);
      if (!p || TERMINAL_RUN_STATES.includes(p.status as RunStatus))
        throw conflict('PARENT_RUN_ENDED', `run ${parent.runId} ended ${p?.status ?? 'gone'}: no child run starts`);
      const [created] = await this.createdInTx(tx, tenantId, [req], { parent }, true);
      return created;
    });
  }

  private async createdInTx(
    tx: TenantTx,
    tenantId: string,
    reqs: CreateRunRequest[],
    lineage: Lineage,
    allOrNothing: true,
  ): Promise<CreateRunResult[]> {
    return (await this.createInTx(tx, tenantId, reqs, lineage, allOrNothing)).map((o) => {
      if ('error' in o) throw o.error;
      return o.result;
    });
  }

  private async resolveVersion(tx: TenantTx, dagId: string, version?: number): Promise<DagVersionRecord> {
    const v = await this.dags.findVersion(tx, dagId, version);
    if (!v)
      throw notFound(
        version === undefined ? `active version of DAG ${dagId}` : `DAG ${dagId} version ${version}`,
        'DAG_NOT_FOUND',
      );
    if (v.status !== 'active') throw conflict('DAG_VERSION_DISABLED', `DAG ${dagId} version ${v.version} is disabled`);
    return v;
  }

  private validateInputs(def: DagDefinition, inputs: unknown): JsonValue {
    const r = compileInputSchema(def.inputs).safeParse(inputs);
    if (!r.success) {
      const i = r.error.issues[0];
      const where = i.path.length > 0 ? i.path.map(String).join('.') : '(root)';
      throw badRequest('INVALID_INPUTS', `inputs ${where}: ${i.message}`, { path: i.path.map(String) });
    }
    return inputs as JsonValue;
  }

  // ---- reads ----

  async list(tenantId: string, q: RunListQuery): Promise<{ items: RunDto[]; nextPageToken: string | null }> {
    const after = decodePageToken(q.pageToken, isAfter);
    const rows = await this.db.withTenant(tenantId, (tx) =>
      this.repo.listRuns(tx, {
        limit: q.limit + 1,
        dagId: q.dagId,
        status: q.status,
        from: q.from ? new Date(q.from) : undefined,
        to: q.to ? new Date(q.to) : undefined,
        after,
      }),
    );
    const items = rows.slice(0, q.limit);
    const last = items[items.length - 1];
    return {
      items: items.map(runDto),
      nextPageToken:
        rows.length > q.limit ? encodePageToken({ t: last.created_at.toISOString(), id: last.run_id }) : null,
    };
  }

  async get(tenantId: string, runId: string): Promise<RunDto & { steps: StepDto[]; waiting: RunWaiting | null }> {
    return this.db.withTenant(tenantId, async (tx) => {
      const run = await this.repo.findRun(tx, runId);
      if (!run) throw notFound('run', 'RUN_NOT_FOUND');
      // What holds an unfinished run up: the headline of its explanation.
      const waiting =
        this.explainer && !TERMINAL_RUN_STATES.includes(run.status as RunStatus)
          ? await this.explainer.waiting(tx, tenantId, runId)
          : null;
      const steps = await this.repo.listSteps(tx, runId);
      const children = steps.some((s) => s.plugin === DAG_STEP_PLUGIN) ? await this.repo.childRuns(tx, runId) : null;
      const tasks = steps.some((s) => s.plugin === QUEUE_STEP_PLUGIN) ? await this.repo.queueTasks(tx, runId) : null;
      return {
        ...runDto(run),
        waiting,
        steps: steps.map((s) => {
          const child = children?.get(s.step_id);
          const dto = child ? { ...stepDto(s), childRunId: child } : stepDto(s);
          const t = tasks?.get(s.step_id);
          if (!t) return dto;
          return {
            ...dto,
            // A queue step that waits for a worker says why.
            ...(s.status === 'waiting' && t.status === 'pending' && t.wait_reason ? { reason: t.wait_reason } : {}),
            task: {
              attemptId: t.task_id,
              status: t.status as NonNullable<StepDto['task']>['status'],
              pool: t.pool,
              taskType: t.task_type,
              waitReason: t.wait_reason,
              worker: t.worker_id && t.worker_name ? { workerId: t.worker_id, name: t.worker_name } : null,
              progress: t.progress ?? null,
            },
          };
        }),
      };
    });
  }

  async attempts(tenantId: string, runId: string, stepId: string) {
    return this.db.withTenant(tenantId, async (tx) => {
      const run = await this.repo.findRun(tx, runId);
      if (!run) throw notFound('run', 'RUN_NOT_FOUND');
      const steps = await this.repo.listSteps(tx, runId);
      if (!steps.some((s) => s.step_id === stepId)) throw notFound('step', 'STEP_NOT_FOUND');
      const rows = await this.repo.listAttempts(tx, runId, stepId);
      return { items: rows.map(attemptDto) };
    });
  }

  async runAttempts(tenantId: string, runId: string) {
    return this.db.withTenant(tenantId, async (tx) => {
      const run = await this.repo.findRun(tx, runId);
      if (!run) throw notFound('run', 'RUN_NOT_FOUND');
      const rows = await this.repo.listRunAttempts(tx, runId);
      return { items: rows.map((a) => ({ stepId: a.step_id, ...attemptDto(a) })) };
    });
  }

  async events(tenantId: string, runId: string, after: number, limit: number) {
    return this.db.withTenant(tenantId, async (tx) => {
      if (!(await this.repo.runExists(tx, runId))) throw notFound('run', 'RUN_NOT_FOUND');
      const rows = await this.repo.listEvents(tx, runId, after, limit + 1);
      const items = rows.slice(0, limit).map((e) => ({
        seq: e.seq,
        createdUtc: e.created_utc,
        type: e.type,
        stepId: e.step_id,
        attempt: e.attempt,
        actor: e.actor,
        data: e.data,
        prevHash: e.prev_hash,
        hash: e.hash,
      }));
      return { items, nextAfter: rows.length > limit ? items[items.length - 1].seq : null };
    });
  }

  // ---- changes ----

  /** Cancels a run from any non-terminal state (idempotent: a cancelled run is returned as is). */
  async cancel(tenantId: string, runId: string, actor: string): Promise<RunDto> {
    const committed: { books?: RunBooks } = {};
    const dto = await this.db.withTenant(tenantId, async (tx) => {
      // The run and its open child runs (and theirs), locked together in key order.
      let tree = [runId, ...(await this.repo.openDescendants(tx, runId))];
      let rows = await this.repo.lockRuns(
        tx,
        tree.map((id) => ({ tenantId, runId: id })),
      );
      const row = rows.find((r) => r.run_id === runId);
      if (!row) throw notFound('run', 'RUN_NOT_FOUND');
      if (row.status !== 'cancelled') {
        if (TERMINAL_RUN_STATES.includes(row.status as RunStatus)) {
          throw conflict('RUN_FINISHED', `run ${runId} already ended ${row.status}`);
        }
        // (A child started before the lock and after the first look is locked now.)
        const late = (await this.repo.openDescendants(tx, runId)).filter((id) => !tree.includes(id));
        if (late.length > 0) {
          tree = [...tree, ...late];
          rows = [
            ...rows,
            ...(await this.repo.lockRuns(
              tx,
              late.map((id) => ({ tenantId, runId: id })),
            )),
          ];
        }
        const books = (committed.books = new RunBooks(rows));
        const ending = rows.filter((r) => !TERMINAL_RUN_STATES.includes(r.status as RunStatus));
        for (const r of ending) {
          const b = books.get(tenantId, r.run_id)!;
          const cancelled = await this.repo.cancelSteps(tx, r.run_id);
          await this.repo.dequeueReady(tx, r.run_id);
          for (const s of cancelled)
            books.event(b, { type: 'step.cancelled', stepId: s.step_id, actor, data: { from: s.old } });
          b.stepsRemaining = 0;
          b.reason = r.run_id === runId ? `cancelled by ${actor}` : `parent run ${runId} cancelled by ${actor}`;
          books.transition(b, 'cancelled', actor);
        }
        await this.repo.admitWaiting(
          tx,
          ending.map((r) => ({ tenantId, runId: r.run_id, dagId: r.dag_id })),
        );
        await this.repo.insertEvents(tx, books.events());
        await this.repo.updateRunBooks(tx, books.updates());
      }
      const run = await this.repo.findRun(tx, runId);
      return runDto(run!);
    });
    const books = committed.books;
    if (books) {
      // A child run cancelled on its own fails its parent's step (its descendants' parents ended with it).
      await this.db.withSystem((tx) => this.repo.notifyParents(tx, tenantId, [runId]));
      // Counted and traced once the cancellation committed.
      observeCommittedEvents(
        books.events(),
        (t, r) => {
          const b = books.get(t, r);
          return b && { dagId: b.row.dag_id, traceId: b.row.trace_id, startedAt: b.row.started_at };
        },
        books.now,
      );
    }
    return dto;
  }

  /** A new run of the same DAG version with the same inputs, linked by replayOf. */
  async replay(tenantId: string, runId: string, actor: string): Promise<CreateRunResult> {
    return this.db.withTenant(tenantId, async (tx) => {
      const [row] = await this.repo.lockRuns(tx, [{ tenantId, runId }]);
      if (!row) throw notFound('run', 'RUN_NOT_FOUND');
      const old = (await this.repo.findRun(tx, runId))!;
      await this.runRate?.take(tenantId, 1);
      const [created] = await this.createdInTx(
        tx,
        tenantId,
        [
          {
            dagId: old.dag_id,
            version: old.dag_version,
            inputs: old.inputs,
            runToken: `replay:${runId}:${randomUUID()}`,
            requestedBy: actor,
          },
        ],
        { replayOf: runId },
        true,
      );
      await this.recordOn(tx, row, { type: 'run.replayed', actor, data: { newRunId: created.runId } });
      return created;
    });
  }

  /**
   * Reruns a failed run from `fromStep`: a new run of the same version and inputs in which every
   * step that succeeded before and is not `fromStep` or downstream of it keeps its outputs
   * (succeeded, fromRerun) instead of executing again.
   */
  async rerun(tenantId: string, runId: string, fromStep: string, actor: string): Promise<CreateRunResult> {
    return this.db.withTenant(tenantId, (tx) => this.rerunIn(tx, tenantId, runId, fromStep, actor));
  }

  /**
   * The rerun of `rerun`, in the caller's transaction, recorded on the failed run as `event`
   * (`run.rerun`; the dead-letter's requeue records `run.deadletter_requeued`) with its actor.
   */
  async rerunIn(
    tx: TenantTx,
    tenantId: string,
    runId: string,
    fromStep: string,
    actor: string,
    event = 'run.rerun',
  ): Promise<CreateRunResult> {
    const [row] = await this.repo.lockRuns(tx, [{ tenantId, runId }]);
    if (!row) throw notFound('run', 'RUN_NOT_FOUND');
    if (row.status !== 'failed')
      throw conflict('RUN_NOT_FAILED', `only a failed run can be rerun from a step (run is ${row.status})`);
    const old = (await this.repo.findRun(tx, runId))!;
    const v = await this.dags.findVersion(tx, old.dag_id, old.dag_version);
    if (!v) throw notFound('run', 'RUN_NOT_FOUND');
    if (!v.definition.steps.some((s) => s.id === fromStep)) throw notFound(`step ${fromStep}`, 'STEP_NOT_FOUND');
    const redo = descendants(v.definition.steps, fromStep);
    redo.add(fromStep);
    await this.runRate?.take(tenantId, 1);
    const reuse: ReusedOutputs = new Map();
    for (const s of await this.repo.succeededOutputs(tx, runId)) {
      if (!redo.has(s.step_id))
        reuse.set(s.step_id, { outputs: (s.outputs ?? null) as JsonValue, outputsHash: s.outputs_hash });
    }
    const [created] = await this.createdInTx(
      tx,
      tenantId,
      [
        {
          dagId: old.dag_id,
          version: old.dag_version,
          inputs: old.inputs,
          runToken: `rerun:${runId}:${randomUUID()}`,
          requestedBy: actor,
        },
      ],
      { rerunOf: runId, rerunFromStep: fromStep, reuse },
      true,
    );
    await this.recordOn(tx, row, { type: event, actor, data: { newRunId: created.runId, fromStep } });
    return created;
  }

  /** Appends an event by `actor` to a run's chain (the run locked first), e.g. an audit of a change elsewhere. */
  async recordIn(
    tx: TenantTx,
    tenantId: string,
    runId: string,
    draft: { type: string; actor: string; data: JsonObject },
  ) {
    const [row] = await this.repo.lockRuns(tx, [{ tenantId, runId }]);
    if (!row) throw notFound('run', 'RUN_NOT_FOUND');
    await this.recordOn(tx, row, draft);
  }

  private async recordOn(tx: TenantTx, row: RunBookRow, draft: { type: string; actor: string; data: JsonObject }) {
    const books = new RunBooks([row]);
    books.event(books.get(row.tenant_id, row.run_id)!, draft);
    await this.repo.insertEvents(tx, books.events());
    await this.repo.updateRunBooks(tx, books.updates());
  }
}

/** Refuses a notBefore more than MAX_NOT_BEFORE_MS ahead (its format is checked at the edge). */
function checkSchedule(r: CreateRunRequest): void {
  if (r.notBefore === undefined) return;
  const at = Date.parse(r.notBefore);
  if (Number.isNaN(at)) throw badRequest('NOT_BEFORE_INVALID', `notBefore ${r.notBefore} is not an RFC 3339 time`);
  if (at - Date.now() > MAX_NOT_BEFORE_MS)
    throw badRequest('NOT_BEFORE_TOO_FAR', `notBefore ${r.notBefore} is more than 366 days ahead`);
}

const compareTokens = (a: NewRun, b: NewRun): number =>
  a.dagId !== b.dagId ? (a.dagId < b.dagId ? -1 : 1) : a.runToken < b.runToken ? -1 : a.runToken > b.runToken ? 1 : 0;

/** Run creations of one tenant in one transaction at most; more arrivals wait for a free slot. */
const MAX_BATCH = 100;
/** Creation transactions of one tenant in flight at once (one is written while the next is planned). */
const MAX_IN_FLIGHT = 2;

interface Waiting {
  req: CreateRunRequest;
  resolve: (r: CreateRunResult) => void;
  reject: (e: unknown) => void;
}

interface TenantBatches {
  waiting: Waiting[];
  inFlight: number;
  scheduled: boolean;
}

/**
 * Group commit of run creations: the calls for one tenant that arrive within one event-loop turn,
 * or while that tenant's creation transactions are busy, are handed to `write` together (one
 * transaction, a few multi-row statements). `write` answers each call on its own.
 */
class CreationBatcher {
  private readonly tenants = new Map<string, TenantBatches>();

  constructor(private readonly write: (tenantId: string, reqs: CreateRunRequest[]) => Promise<CreateOutcome[]>) {}

  submit(tenantId: string, req: CreateRunRequest): Promise<CreateRunResult> {
    return new Promise((resolve, reject) => {
      let t = this.tenants.get(tenantId);
      if (!t) {
        t = { waiting: [], inFlight: 0, scheduled: false };
        this.tenants.set(tenantId, t);
      }
      t.waiting.push({ req, resolve, reject });
      this.schedule(tenantId, t);
    });
  }

  private schedule(tenantId: string, t: TenantBatches): void {
    if (t.scheduled || t.inFlight >= MAX_IN_FLIGHT || t.waiting.length === 0) return;
    t.scheduled = true;
    setImmediate(() => {
      t.scheduled = false;
      void this.flush(tenantId, t);
    });
  }

  private async flush(tenantId: string, t: TenantBatches): Promise<void> {
    if (t.inFlight >= MAX_IN_FLIGHT || t.waiting.length === 0) return;
    const batch = t.waiting.splice(0, MAX_BATCH);
    t.inFlight++;
    this.schedule(tenantId, t);
    try {
      const outcomes = await this.write(
        tenantId,
        batch.map((w) => w.req),
      );
      batch.forEach((w, i) => {
        const o = outcomes[i];
        if ('error' in o) w.reject(o.error);
        else w.resolve(o.result);
      });
    } catch (e) {
      for (const w of batch) w.reject(e);
    } finally {
      t.inFlight--;
      if (t.waiting.length > 0) this.schedule(tenantId, t);
      else if (t.inFlight === 0 && !t.scheduled) this.tenants.delete(tenantId);
    }
  }
}

/**
 * Tenant transactions on the application pool (same role, same transaction-local tenant binding
 * as Database.withTenant) in which every parameterised statement is a named prepared statement
 * (preparedKysely), so PostgreSQL parses and plans the creation statements once per connection
 * instead of once per group.
 */
class PreparedTenantTransactions {
  /** The handle itself, for statements that bind their tenant (see TenantStatement). */
  readonly handle: Kysely<DB>;

  constructor(db: Database) {
    this.handle = preparedKysely(db.appPool, {
      prefix: 'ordo_r_',
      refresh: db.planRefresh,
      named: db.preparedStatements,
    });
  }

  withTenant<T>(tenantId: string, fn: (tx: TenantTx) => Promise<T>): Promise<T> {
    return tenantTransaction(this.handle, tenantId, fn);
  }
}

function iso(d: Date | string | null): string | null {
  return d === null ? null : new Date(d).toISOString();
}

export function runDto(r: RunRow): RunDto {
  return {
    runId: r.run_id,
    dagId: r.dag_id,
    version: r.dag_version,
    contentHash: r.content_hash,
    status: r.status as RunDto['status'],
    reason: r.reason,
    traceId: r.trace_id,
    runToken: r.run_token,
    inputs: r.inputs,
    inputsHash: r.inputs_hash,
    outputsHash: r.outputs_hash,
    requestedBy: r.requested_by,
    replayOf: r.replay_of,
    rerunOf: r.rerun_of,
    rerunFromStep: r.rerun_from_step,
    priority: r.priority,
    notBefore: iso(r.not_before),
    parentRunId: r.parent_run_id,
    parentStepId: r.parent_step_id,
    depth: r.depth,
    startedUtc: iso(r.created_at)!,
    dispatchedUtc: iso(r.started_at),
    finishedUtc: iso(r.finished_at),
    stepsTotal: r.steps_total,
    stepsRemaining: r.steps_remaining,
    lastEventSeq: r.event_seq,
    lastEventHash: r.event_hash,
  };
}

function attemptDto(a: Selectable<Attempt>): AttemptDto {
  return {
    attempt: a.attempt,
    status: a.status,
    workerId: a.worker_id,
    epoch: a.epoch,
    traceparent: a.traceparent,
    leaseExpiresUtc: iso(a.lease_expires_at)!,
    queuedUtc: iso(a.queued_at),
    claimedUtc: iso(a.claimed_at)!,
    conditionPendingUtc: iso(a.condition_pending_at),
    constraintCheckedUtc: iso(a.constraint_checked_at),
    startedUtc: iso(a.started_at),
    finishedUtc: iso(a.finished_at),
    terminatedUtc: iso(a.terminated_at),
    error: a.error ?? null,
    outputsHash: a.outputs_hash,
    logsHash: a.logs_hash,
  };
}

export function stepDto(s: StepRow): StepDto {
  return {
    stepId: s.step_id,
    status: s.status as StepDto['status'],
    reason: s.reason,
    plugin: s.plugin,
    dependsOn: s.depends_on,
    topoIndex: s.topo_index,
    dispatchSeq: s.dispatch_seq,
    attempts: s.attempts,
    namedStatus: s.named_status,
    outputs: s.outputs ?? null,
    outputsHash: s.outputs_hash,
    logsHash: s.logs_hash,
    error: s.error ?? null,
    fromRerun: s.from_rerun,
    queuedUtc: iso(s.queued_at),
    startedUtc: iso(s.started_at),
    finishedUtc: iso(s.finished_at),
  };
}
