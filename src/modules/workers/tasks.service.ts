import { type BeforeApplicationShutdown, Inject, Injectable, Logger } from '@nestjs/common';
import { createHash } from 'node:crypto';
import { ORDO_CONFIG } from '../../core/config/config.module';
import type { OrdoConfig } from '../../core/config/config';
import { Database } from '../../core/database/database';
import type { SystemTx } from '../../core/database/handles';
import { conflict, DomainError, notFound } from '../../core/errors/domain-error';
import type { WorkerPrincipalT } from '../../core/http/request-context';
import { canonicalJson } from '../../core/json/canonical-json';
import { completionFor, EngineStore, type Completion } from '../engine/engine.store';
import { taskInputsContext, taskSecretsContext, unknownStatus } from '../engine/step-executor';
import { dagDefinition } from '../dags/dag-definition';
import { QUOTA_EXCEEDED } from '../plans/quota-exceeded';
import { QuotaChecks } from '../plans/quota-checks';
import { makeRedactor, redactJson } from '../secrets/redact';
import type { JsonObject, JsonValue, PluginError, StepLogLine } from '../plugins/plugin';
import { RunBooks } from '../runs/run-book';
import { RunsRepository } from '../runs/runs.repository';
import { SecretsService } from '../secrets/secrets.service';
import type { TaskVerdict } from './reputation';
import { QueueHandOver } from './queue-hand-over';
import { ReputationBook } from './reputation-book';
import { TaskInbox } from './task-inbox';
import { TaskSchemas } from './task-schemas';
import { WorkerDirectory, type KnownWorker } from './worker-directory';
import { WorkerLiveness } from './worker-liveness';
import type {
  ProgressBody,
  ResultAnswer,
  ResultBody,
  ResultsAnswer,
  ResultsBody,
  SyncAnswer,
  TaskDto,
} from './workers.dto';
import { WorkersRepository, type TaskEnd, type TaskRow } from './workers.repository';

/** Redacts a worker's text, and the strings of a JSON value, against a task's secret values. */
interface Redactor {
  text(s: string): string;
  json<T extends JsonValue>(v: T): T;
}

/** The redactor of a task whose inputs carried no secret. */
const UNREDACTED: Redactor = { text: (s) => s, json: (v) => v };

/** Progress events a task may append to its run (more are kept on the task only). */
const MAX_PROGRESS_EVENTS = 100;
/** The most often a task's progress becomes a run event. */
const PROGRESS_EVENT_EVERY_MS = 1_000;
const MAX_PROGRESS_DATA_BYTES = 4 * 1024;

/** A verdict on a worker name, recorded after its transaction commits (see ReputationBook). */
interface Judged {
  tenantId: string;
  pool: string;
  name: string;
  verdict: TaskVerdict;
}

/** A result waiting for its batch (see TasksService.flush). */
interface PendingResult {
  w: KnownWorker;
  taskId: string;
  body: ResultBody;
  digest: string;
  resolve: (a: ResultAnswer | 'late') => void;
  reject: (e: unknown) => void;
}

/** What a result makes of its task (see TasksService.outcome). */
interface Applied {
  result: Completion;
  decided: { type: string; data: JsonObject };
  verdict: TaskVerdict;
  violation: boolean;
  answer: ResultAnswer;
}

/** Results applied in one transaction at most. */
const MAX_RESULT_BATCH = 200;

/** Result transactions under way at once in a process, each over runs the others do not hold. */
const MAX_RESULT_FLUSHES = 2;

/**
 * Results a batch needs to start while another is under way: fewer wait for the next batch, so
 * results that come a few at a time (long-polls' posts) still go in batches about as large as with
 * one transaction at a time.
 */
const MIN_CONCURRENT_BATCH = 32;

/** Tasks handed over by this process whose runs it remembers (the oldest are forgotten past it). */
const RUNS_REMEMBERED = 50_000;
/** Steps whose declared statuses a process keeps. */
const STEPS_REMEMBERED = 10_000;

type Resolve = (result: Completion, decided: { type: string; data: JsonObject }) => Promise<boolean>;

/**
 * The tasks of queue steps on the worker's side: pulls (a long-poll that waits on the process's
 * wake-ups, not on the database), results (checked against the task's epoch and the worker's output
 * schema, idempotent, applied to the waiting step as ordo_engine_resolve applies a decision, with
 * the worker's reputation), progress, and the ends that come from elsewhere: a worker lost (its
 * started tasks orphaned and retried by the step's policy), a deadline passed, a dispatch timeout.
 */
@Injectable()
export class TasksService implements BeforeApplicationShutdown {
  private readonly log = new Logger('workers');
  readonly schemas = new TaskSchemas();
  private readonly lastProgress = new Map<string, number>();
  private readonly pending: PendingResult[] = [];
  /**
   * Transactions of this process applying results. At most MAX_RESULT_FLUSHES at once, and a batch
   * takes no result of a run (or task) that a batch under way holds: two batches over the same runs
   * would wait on each other's rows, which costs PostgreSQL more than their overlap gains. The
   * results that arrive meanwhile make the next batches larger.
   */
  private flushes = 0;
  /** The runs and tasks of the batches under way. */
  private readonly busyRuns = new Set<string>();
  private readonly busyTasks = new Set<string>();
  /** The named statuses of the steps whose tasks had results here (see statusesOf). */
  private readonly declaredStatuses = new Map<string, readonly string[] | undefined>();
  /** The run (tenant/run id) of each task this process handed to a worker, for the batches above. */
  private readonly runOf = new Map<string, string>();
  /**
   * Aborted when the process stops, before its HTTP server closes: the long-polls waiting here are
   * answered at once (no task) instead of holding the close for up to their wait, and their
   * workers pull again from another instance.
   */
  private readonly stopping = new AbortController();

  constructor(
    @Inject(ORDO_CONFIG) private readonly config: OrdoConfig,
    private readonly db: Database,
    private readonly repo: WorkersRepository,
    private readonly runs: RunsRepository,
    private readonly store: EngineStore,
    private readonly secrets: SecretsService,
    private readonly inbox: TaskInbox,
    private readonly directory: WorkerDirectory,
    private readonly liveness: WorkerLiveness,
    private readonly reputation: ReputationBook,
    private readonly queueSteps: QueueHandOver,
    private readonly quotas: QuotaChecks,
  ) {}

  beforeApplicationShutdown(): void {
    this.stopping.abort();
  }

  /**
   * Up to `max` tasks for the worker: at once when it has some assigned, else when one is assigned
   * within `waitMs` (none: empty; at once when the process stops). A draining worker gets none, at
   * once. While it waits, a dispatch in this process delivers to it directly (see
   * TaskInbox.dispatch).
   */
  async next(
    p: WorkerPrincipalT,
    workerId: string,
    max: number,
    waitMs: number,
    request: AbortSignal,
  ): Promise<TaskDto[]> {
    // The request gone or the process stopping ends the pull (listeners removed after, so the
    // process's signal keeps none of its pulls).
    const ac = new AbortController();
    const stop = () => ac.abort();
    if (request.aborted || this.stopping.signal.aborted) stop();
    request.addEventListener('abort', stop);
    this.stopping.signal.addEventListener('abort', stop);
    try {
      return await this.pull(p, workerId, max, waitMs, ac.signal);
    } finally {
      request.removeEventListener('abort', stop);
      this.stopping.signal.removeEventListener('abort', stop);
    }
  }

  /** The worker is gone at once (it left, or its token stopped holding): offline, its tasks released. */
  async takeOffline(w: Pick<KnownWorker, 'tenantId' | 'workerId' | 'pool'>): Promise<void> {
    const left = await this.db.withSystem((tx) => this.repo.setStatus(tx, w.tenantId, w.workerId, 'offline'));
    this.directory.setStatus(w.workerId, 'offline');
    if (left) await this.releaseWorker(w.tenantId, w.workerId, w.pool);
  }

  private async pull(
    p: WorkerPrincipalT,
    workerId: string,
    max: number,
    waitMs: number,
    abort: AbortSignal,
  ): Promise<TaskDto[]> {
    const w = await this.directory.live(p, workerId);
    this.liveness.seen(w.tenantId, w.workerId);
    const until = Date.now() + waitMs;
    for (;;) {
      if (w.status !== 'online' || abort.aborted) return [];
      if (this.inbox.mayHaveWork(w.tenantId, w.workerId)) {
        const mark = this.inbox.mark(w.tenantId, w.workerId);
        const tasks = await this.take(w, max);
        if (tasks.length > 0) return tasks;
        this.inbox.foundNothing(w.tenantId, w.workerId, mark);
        // A wake-up heard while it looked (a task assigned after its look began) is not heard
        // again by the wait below: it looks once more.
        if (this.inbox.mark(w.tenantId, w.workerId) !== mark) continue;
      }
      const left = until - Date.now();
      if (left <= 0) return [];
      const delivered = await this.wake(w, max, left, abort);
      if (delivered.length > 0) {
        const tasks = await this.handOver(w, delivered);
        if (tasks.length > 0) return tasks;
      }
    }
  }

  /**
   * The worker's tasks delivered to it that it does not hold are delivered again: a channel or a
   * long-poll answer lost on the way (a dropped connection) leaves a task delivered that the worker
   * never got. The worker says what it holds after such a loss, before it pulls again; the same
   * attempt at the same epoch comes back, so a result stays idempotent. A sync over HTTP says the
   * worker pulls by long-poll: a channel of it still taken for open anywhere (its socket may be
   * dead without its process knowing yet) is closed, and its unanswered tasks come to the pulls.
   */
  async sync(p: WorkerPrincipalT, workerId: string, holding: string[], via: 'channel' | 'http'): Promise<SyncAnswer> {
    const w = await this.directory.live(p, workerId);
    this.liveness.seen(w.tenantId, w.workerId);
    if (via === 'http') await this.repo.announceConnection(this.db.system, w.tenantId, w.workerId);
    const redelivered = await this.db.withWorkerPool(w.tenantId, w.pool, (tx) =>
      this.repo.redeliver(tx, w.workerId, holding),
    );
    // A draining worker takes no task: those go back to the pool, as its assigned ones did at drain.
    if (redelivered.length > 0 && w.status === 'draining')
      await this.db.withSystem(async (tx) => {
        await this.repo.unassign(tx, w.tenantId, w.workerId);
        await this.repo.wakeDispatch(tx, w.tenantId, w.pool);
      });
    return { redelivered };
  }

  /**
   * Waits until the worker may have a task, its status changes, `ms` pass or `abort` fires; or
   * until a dispatch here delivers it up to `max` tasks, which it resolves with.
   */
  private wake(w: KnownWorker, max: number, ms: number, abort: AbortSignal): Promise<TaskRow[]> {
    return new Promise((resolve) => {
      let settled = false;
      let reserved = false;
      const done = (rows: TaskRow[] = []) => {
        settled = true;
        clearTimeout(timer);
        unsubscribe();
        untake();
        abort.removeEventListener('abort', expire);
        resolve(rows);
      };
      // A dispatch under way for this pull keeps it until it is handed its tasks.
      const expire = () => {
        if (!reserved) done();
        else settled = true;
      };
      const timer = setTimeout(expire, ms);
      const unsubscribe = this.inbox.subscribe(w.tenantId, w.workerId, { task: expire, status: expire });
      const untake = this.inbox.addTaker({
        tenantId: w.tenantId,
        pool: w.pool,
        workerId: w.workerId,
        reserve: () => {
          if (settled || reserved || w.status !== 'online') return 0;
          reserved = true;
          return max;
        },
        settle: (rows) => {
          reserved = false;
          // A pull whose request went away takes nothing: its tasks go back to be pulled again.
          if (abort.aborted) {
            done();
            return false;
          }
          if (rows.length > 0 || settled) done(rows);
          return true;
        },
      });
      abort.addEventListener('abort', expire);
    });
  }

  /**
   * Delivers up to `max` of the tasks assigned to `w` (its tenant's and pool's transaction).
   */
  async take(w: KnownWorker, max: number): Promise<TaskDto[]> {
    const rows = await this.db.withWorkerPool(w.tenantId, w.pool, (tx) => this.repo.deliver(tx, w.workerId, max));
    return this.handOver(w, rows);
  }

  /**
   * The tasks delivered to `w`, as it receives them: each with its inputs (unsealed when they carry
   * secrets); one whose inputs do not match the worker's input schema is not handed over, and its
   * step fails (invalid_input, INPUT_SCHEMA_MISMATCH).
   */
  async handOver(w: KnownWorker, rows: TaskRow[]): Promise<TaskDto[]> {
    const out: TaskDto[] = [];
    for (const t of rows) {
      const inputs = (
        t.inputs_sealed
          ? this.secrets.openJson(taskInputsContext(t.tenant_id, t.run_id, t.step_id, t.attempt), t.inputs_sealed)
          : (t.inputs ?? {})
      ) as JsonValue;
      const schema = w.taskTypes[t.task_type]?.inputSchema;
      const mismatch = schema ? this.schemas.mismatch(schema, inputs) : null;
      if (mismatch !== null) {
        await this.refuseInputs(w, t, mismatch);
        continue;
      }
      this.runOf.set(t.task_id, `${t.tenant_id}/${t.run_id}`);
      if (this.runOf.size > RUNS_REMEMBERED) this.runOf.delete(this.runOf.keys().next().value!);
      out.push({
        attemptId: t.task_id,
        runId: t.run_id,
        stepId: t.step_id,
        attempt: t.attempt,
        epoch: t.epoch,
        taskType: t.task_type,
        inputs,
        // (Its assignment gave it one.)
        deadline: t.deadline!.toISOString(),
        traceparent: t.traceparent,
        dagId: t.dag_id,
        dagVersion: t.dag_version,
      });
    }
    return out;
  }

  /**
   * Tasks delivered to `w` that never reached it (its channel closed before they were sent):
   * assigned to it again, and it is told, so its next channel or pull gets them.
   */
  async giveBack(w: KnownWorker, taskIds: string[]): Promise<void> {
    await this.repo.undeliver(
      this.db.system,
      taskIds.map((task_id) => ({ tenant_id: w.tenantId, task_id, worker_id: w.workerId })),
    );
  }

  /**
   * A channel of `w` opened in this process: the api processes are told (a worker has one channel,
   * the newest), and its stamp is returned, by which they order it against theirs (see
   * WorkerChannelGateway).
   */
  channelOpened(w: KnownWorker): Promise<number> {
    return this.repo.announceConnection(this.db.system, w.tenantId, w.workerId);
  }

  /** The stamps of these workers' newest connections (a channel opened, or a sync over HTTP). */
  async newestConnections(
    workers: { tenantId: string; workerId: string }[],
  ): Promise<{ tenantId: string; workerId: string; stamp: number }[]> {
    const rows = await this.repo.channelStamps(this.db.system, workers);
    return rows.map((r) => ({ tenantId: r.tenant_id, workerId: r.worker_id, stamp: r.stamp }));
  }

  private async refuseInputs(w: KnownWorker, t: TaskRow, mismatch: string): Promise<void> {
    const message = `the task's inputs do not match the input schema of ${t.task_type} on worker ${w.name}: ${mismatch}`;
    await this.store.withResolve(async (tx, resolve) => {
      if (!(await this.repo.endTask(tx, t.tenant_id, t.task_id, 'failed', 'INPUT_SCHEMA_MISMATCH', null))) return;
      await this.resolveFailed(resolve, t, w, {
        code: 'INPUT_SCHEMA_MISMATCH',
        message,
        retryable: false,
        class: 'invalid_input',
        input: `with.inputs`,
      });
      await this.repo.wakeDispatch(tx, t.tenant_id, t.pool);
    });
  }

  /**
   * A worker's result for a task it holds: applied once (the same result again answers duplicate;
   * another one 409 RESULT_CONFLICT); refused with nothing changed for a wrong epoch (409
   * STALE_EPOCH), a task that is not its own (404), or that ended otherwise (409 TASK_CANCELLED, or
   * TASK_ORPHANED: a late result, counted on the task and recorded on the run as step.result_rejected).
   * Results that arrive together are applied together (see `flush`).
   */
  async result(p: WorkerPrincipalT, workerId: string, taskId: string, body: ResultBody): Promise<ResultAnswer> {
    const w = await this.directory.get(p, workerId);
    const outputs = body.status === 'succeeded' ? body.outputs : undefined;
    const bytes = outputs === undefined ? 0 : Buffer.byteLength(canonicalJson(outputs), 'utf8');
    if (bytes > this.config.ORDO_EXTERNAL_WORKER_MAX_OUTPUT_BYTES)
      throw new DomainError(
        'OUTPUTS_TOO_LARGE',
        `the outputs are ${bytes} bytes as canonical JSON; at most ${this.config.ORDO_EXTERNAL_WORKER_MAX_OUTPUT_BYTES}`,
        413,
      );
    this.liveness.seen(w.tenantId, w.workerId);
    const digest = createHash('sha256').update(canonicalJson(body)).digest('hex');
    // Its worker's slot is free from now on for this process's dispatches (see TaskInbox.landed).
    const release = this.inbox.landed(w.tenantId, w.pool, taskId);
    const answer = await new Promise<ResultAnswer | 'late'>((resolve, reject) => {
      this.pending.push({ w, taskId, body, digest, resolve, reject });
      this.flushSoon();
    }).finally(release);
    if (answer !== 'late') return answer;
    await this.recordLate(w, taskId, body);
    throw conflict('TASK_ORPHANED', `task ${taskId} was given up when its worker was lost: its result is refused`);
  }

  /**
   * Several results of one worker in one post, each applied as `result` applies it (so together, in
   * the same batches) and answered on its own: its answer, or the refusal it alone would have had
   * (nothing changed for it). A worker unknown to the token's tenant and pool answers the whole
   * post (404); so does an unexpected failure, after which the worker posts again (a result
   * applied already answers duplicate).
   */
  async results(p: WorkerPrincipalT, workerId: string, body: ResultsBody): Promise<ResultsAnswer> {
    await this.directory.get(p, workerId);
    const settled = await Promise.allSettled(
      body.results.map(({ attemptId, ...result }) => this.result(p, workerId, attemptId, result)),
    );
    const unexpected = settled.find((s) => s.status === 'rejected' && !(s.reason instanceof DomainError));
    if (unexpected) throw (unexpected as PromiseRejectedResult).reason;
    return {
      results: settled.map((s, i) => {
        const attemptId = body.results[i].attemptId;
        if (s.status === 'fulfilled') return { attemptId, answer: s.value };
        const e = s.reason as DomainError;
        return { attemptId, refused: { status: e.status, code: e.code, message: e.message } };
      }),
    };
  }

  private flushSoon(): void {
    if (this.flushes >= MAX_RESULT_FLUSHES || this.freeCount(this.flushes === 0 ? 1 : MIN_CONCURRENT_BATCH) === 0)
      return;
    this.flushes++;
    setImmediate(
      () =>
        void this.flush().finally(() => {
          this.flushes--;
          // Results queued after the last batch was taken, or held back by a batch that has ended.
          this.flushSoon();
        }),
    );
  }

  /** How many waiting results may join a new batch, counted up to `upTo`; 0 when fewer. */
  private freeCount(upTo: number): number {
    let n = 0;
    for (const r of this.pending) if (this.free(r) && ++n >= upTo) return n;
    return 0;
  }

  /** Whether a waiting result may join a new batch: no batch under way holds its task or run. */
  private free(r: PendingResult): boolean {
    const run = this.runOf.get(r.taskId);
    return !this.busyTasks.has(r.taskId) && (run === undefined || !this.busyRuns.has(run));
  }

  /**
   * Applies the waiting results in batches, one transaction each (group commit): their tasks locked
   * in key order, each checked, the accepted ones resolved in one ordo_engine_resolve. A batch that
   * fails as a whole is applied again one result at a time, so one bad result fails only itself.
   */
  private async flush(): Promise<void> {
    for (;;) {
      // Alongside another batch, only a large enough one goes (see MIN_CONCURRENT_BATCH).
      if (this.flushes > 1 && this.freeCount(MIN_CONCURRENT_BATCH) === 0) return;
      const batch: PendingResult[] = [];
      const later: PendingResult[] = [];
      const mine = new Set<string>();
      // The results of a run go together; a second result for the same task, or one of a run that
      // another batch under way holds, waits for a later batch.
      for (const r of this.pending) {
        const run = this.runOf.get(r.taskId);
        const taken = run !== undefined && mine.has(run);
        if (batch.length < MAX_RESULT_BATCH && !this.busyTasks.has(r.taskId) && (taken || this.free(r))) {
          batch.push(r);
          this.busyTasks.add(r.taskId);
          if (run !== undefined && !taken) {
            mine.add(run);
            this.busyRuns.add(run);
          }
        } else later.push(r);
      }
      this.pending.splice(0, this.pending.length, ...later);
      if (batch.length === 0) return;
      // What this batch left may go to another transaction meanwhile.
      this.flushSoon();
      try {
        await this.applyResults(batch);
      } catch (e) {
        if (batch.length === 1) batch[0].reject(e);
        else
          for (const r of batch)
            await this.applyResults([r]).catch((err: unknown) => {
              r.reject(err);
            });
      } finally {
        for (const r of batch) {
          this.busyTasks.delete(r.taskId);
          this.runOf.delete(r.taskId);
        }
        for (const run of mine) this.busyRuns.delete(run);
      }
    }
  }

  private async applyResults(batch: PendingResult[]): Promise<void> {
    const judged: Judged[] = [];
    const answers: { r: PendingResult; answer: ResultAnswer | 'late' | Error }[] = [];
    await this.store.withResolve(async (tx, _resolve, resolveAll) => {
      answers.length = 0;
      judged.length = 0;
      const rows = await this.repo.lockTasks(
        tx,
        batch.map((r) => ({ tenantId: r.w.tenantId, pool: r.w.pool, taskId: r.taskId })),
      );
      const open: { r: PendingResult; t: TaskRow; applied: Applied }[] = [];
      for (const r of batch) {
        const t = rows.get(`${r.w.tenantId}/${r.taskId}`);
        const refused = this.check(r, t);
        if (refused !== null) answers.push({ r, answer: refused });
        else open.push({ r, t: t!, applied: this.outcome(r.w, t!, r.body, await this.judgeSuccess(r.w, t!, r.body)) });
      }
      // Queue steps these results make ready are handed over to their tasks in this transaction.
      const ok = await resolveAll(
        open.map((o) => ({ result: o.applied.result, decided: o.applied.decided })),
        this.queueSteps.handOver,
      );
      const ends: TaskEnd[] = [];
      open.forEach((o, i) => {
        if (!ok[i]) {
          ends.push({
            tenantId: o.t.tenant_id,
            taskId: o.t.task_id,
            status: 'cancelled',
            reason: 'step_ended',
            digest: null,
          });
          answers.push({
            r: o.r,
            answer: conflict('TASK_CANCELLED', `task ${o.r.taskId} was cancelled: its result is not used`),
          });
          return;
        }
        ends.push({
          tenantId: o.t.tenant_id,
          taskId: o.t.task_id,
          status: o.applied.answer.outcome,
          reason: o.applied.violation ? 'CONTRACT_VIOLATION' : null,
          digest: o.r.digest,
        });
        judged.push({ tenantId: o.t.tenant_id, pool: o.t.pool, name: o.r.w.name, verdict: o.applied.verdict });
        answers.push({ r: o.r, answer: o.applied.answer });
      });
      await this.repo.endTasks(tx, ends);
    });
    // The slots these results freed go to the pools' pending tasks at once, delivered to the
    // workers that wait here (the answers need not wait for it).
    for (const pool of new Set(batch.map((r) => JSON.stringify([r.w.tenantId, r.w.pool])))) {
      const [tenantId, name] = JSON.parse(pool) as [string, string];
      void this.inbox.dispatch(tenantId, name);
    }
    this.judge(judged);
    for (const { r, answer } of answers) {
      if (answer instanceof Error) r.reject(answer);
      else r.resolve(answer);
    }
  }

  /** Why a result cannot be applied to its task as it is (an error, a duplicate's answer, or late); null when it can. */
  private check(r: PendingResult, t: TaskRow | undefined): Error | ResultAnswer | 'late' | null {
    if (!t || t.worker_id !== r.w.workerId)
      return notFound(`task ${r.taskId} of worker ${r.w.workerId}`, 'TASK_NOT_FOUND');
    if (r.body.epoch !== t.epoch)
      return conflict('STALE_EPOCH', `task ${r.taskId} is at epoch ${t.epoch}; the result names ${r.body.epoch}`);
    switch (t.status) {
      case 'succeeded':
      case 'failed':
        if (t.result_digest === r.digest) return { outcome: t.status, duplicate: true };
        return conflict('RESULT_CONFLICT', `task ${r.taskId} already has another result`);
      case 'cancelled':
        return conflict('TASK_CANCELLED', `task ${r.taskId} was cancelled: its result is not used`);
      case 'orphaned':
        return 'late';
      case 'pending':
      case 'assigned':
      case 'delivered':
        return null;
    }
  }

  /**
   * Why a success cannot end its step as it says, as for a built-in plugin's: outputs that do not
   * match the worker's output schema (CONTRACT_VIOLATION, against the worker), a named status the
   * step does not declare (UNKNOWN_STATUS), outputs that would take the tenant past its plan's
   * maxArtifactBytes (QUOTA_EXCEEDED, not the worker's doing). Null for a failure or a success
   * that stands.
   */
  private async judgeSuccess(
    w: KnownWorker,
    t: TaskRow,
    body: ResultBody,
  ): Promise<{ error: PluginError; verdict: TaskVerdict } | null> {
    if (body.status !== 'succeeded') return null;
    const violation = this.violation(w, t, body.outputs ?? {});
    if (violation) return { error: violation, verdict: 'violation' };
    const unknown = unknownStatus(await this.statusesOf(t), body.namedStatus);
    if (unknown) return { error: { code: 'UNKNOWN_STATUS', message: unknown, retryable: false }, verdict: 'failure' };
    const refused = await this.quotas.artifactRefusal(t.tenant_id, () =>
      Buffer.byteLength(canonicalJson(body.outputs ?? {}), 'utf8'),
    );
    if (!refused) return null;
    return {
      error: {
        code: QUOTA_EXCEEDED,
        message: `the step's outputs would take the tenant past its plan's maxArtifactBytes (${refused.value}; ${refused.current} stored)`,
        retryable: false,
        class: 'permanent',
      },
      verdict: 'neutral',
    };
  }

  /** The named statuses a task's step declares (DAG versions are immutable: kept once read). */
  private async statusesOf(t: TaskRow): Promise<readonly string[] | undefined> {
    const stepId = t.step_id.replace(/\[\d+\]$/, '');
    const k = `${t.tenant_id}\u0000${t.dag_id}\u0000${t.dag_version}\u0000${stepId}`;
    if (this.declaredStatuses.has(k)) return this.declaredStatuses.get(k);
    const definition = dagDefinition.parse(await this.store.dagDefinition(t.tenant_id, t.dag_id, t.dag_version));
    const declared = definition.steps.find((s) => s.id === stepId)?.statuses;
    if (this.declaredStatuses.size >= STEPS_REMEMBERED)
      this.declaredStatuses.delete(this.declaredStatuses.keys().next().value!);
    this.declaredStatuses.set(k, declared);
    return declared;
  }

  /** What a result makes of its task's step: the completion, its event, the verdict on the worker and the answer. */
  private outcome(
    w: KnownWorker,
    t: TaskRow,
    body: ResultBody,
    refused: { error: PluginError; verdict: TaskVerdict } | null,
  ): Applied {
    const redact = this.redactorOf(t);
    const logs: StepLogLine[] = (body.logs ?? []).map((l) => ({
      ts: new Date().toISOString(),
      ...l,
      message: redact.text(l.message),
    }));
    let verdict: TaskVerdict;
    let outcome: Completion['outcome'];
    if (refused) {
      verdict = refused.verdict;
      outcome = { status: 'failed', error: { ...refused.error, message: redact.text(refused.error.message) }, logs };
    } else if (body.status === 'succeeded') {
      verdict = 'success';
      outcome = {
        status: 'succeeded',
        outputs: redact.json((body.outputs ?? {}) as JsonObject),
        ...(body.namedStatus !== undefined ? { namedStatus: body.namedStatus } : {}),
        logs,
      };
    } else {
      const e = body.error;
      verdict = e.class === 'invalid_input' ? 'neutral' : 'failure';
      outcome = {
        status: 'failed',
        error: { code: e.code, message: redact.text(e.message), retryable: e.class === 'transient', class: e.class },
        logs,
      };
    }
    const status = outcome.status === 'succeeded' ? 'succeeded' : 'failed';
    const key = { tenantId: t.tenant_id, runId: t.run_id, stepId: t.step_id, attempt: t.attempt, epoch: t.epoch };
    const result = completionFor(key, `worker:${w.name}`, outcome, t.delivered_at, new Date());
    // Names, not instance or task ids: the same results of the same workers make the same events.
    const data: JsonObject = {
      worker: w.name,
      pool: w.pool,
      taskType: t.task_type,
      status,
      ...(outcome.status === 'failed'
        ? { error: { code: outcome.error.code, class: outcome.error.class ?? null } }
        : {}),
    };
    return {
      result,
      decided: { type: 'step.worker_result', data },
      verdict,
      violation: refused?.verdict === 'violation',
      answer: {
        outcome: status,
        duplicate: false,
        ...(outcome.status === 'failed' ? { error: { code: outcome.error.code, message: outcome.error.message } } : {}),
      },
    };
  }

  /**
   * What is kept of a worker's words about a task (outputs, error, logs, progress) is redacted
   * against the secret values its inputs carried, as the built-in plugins' results are: a worker
   * trusted with a secret does not echo it into the run's record or the tenant's stream.
   */
  private redactorOf(t: TaskRow): Redactor {
    if (!t.secrets_sealed) return UNREDACTED;
    const values = this.secrets.openJson(
      taskSecretsContext(t.tenant_id, t.run_id, t.step_id, t.attempt),
      t.secrets_sealed,
    ) as string[];
    const text = makeRedactor(values);
    return { text, json: (v) => redactJson(text, v) };
  }

  /** A succeeded result's contract violation (outputs not matching the worker's output schema), if any. */
  private violation(w: KnownWorker, t: TaskRow, outputs: unknown): PluginError | null {
    const schema = w.taskTypes[t.task_type]?.outputSchema;
    if (!schema) return null;
    const mismatch = this.schemas.mismatch(schema, outputs);
    if (mismatch === null) return null;
    return {
      code: 'CONTRACT_VIOLATION',
      message: `the outputs of worker ${w.name} do not match the output schema of ${t.task_type}: ${mismatch}`,
      retryable: false,
      class: 'permanent',
    };
  }

  /** A result that came after its task was orphaned: counted on the task and recorded on its run. */
  private async recordLate(w: KnownWorker, taskId: string, body: ResultBody): Promise<void> {
    await this.db.withSystem(async (tx) => {
      const t = await this.repo.lockTask(tx, w.tenantId, w.pool, taskId);
      if (!t) return;
      await this.repo.countLateResult(tx, t.tenant_id, t.task_id);
      await this.runEvent(tx, t, 'step.result_rejected', `worker:${w.name}`, {
        reason: 'task_orphaned',
        workerId: w.workerId,
        taskId: t.task_id,
        epoch: body.epoch,
        status: body.status,
      });
    });
  }

  /**
   * A task's progress: kept on the task (the step's record shows the latest), and appended to its
   * run as a step.progress event (on the tenant's stream) at most once a second and 100 times a task.
   */
  async progress(p: WorkerPrincipalT, workerId: string, taskId: string, body: ProgressBody): Promise<void> {
    const w = await this.directory.get(p, workerId);
    if (body.data !== undefined && Buffer.byteLength(JSON.stringify(body.data), 'utf8') > MAX_PROGRESS_DATA_BYTES)
      throw new DomainError('PROGRESS_TOO_LARGE', `progress data is at most ${MAX_PROGRESS_DATA_BYTES} bytes`, 413);
    this.liveness.seen(w.tenantId, w.workerId);
    const at = new Date().toISOString();
    await this.db.withSystem(async (tx) => {
      const t = await this.repo.lockTask(tx, w.tenantId, w.pool, taskId);
      if (!t || t.worker_id !== w.workerId) throw notFound(`task ${taskId} of worker ${workerId}`, 'TASK_NOT_FOUND');
      if (body.epoch !== t.epoch)
        throw conflict('STALE_EPOCH', `task ${taskId} is at epoch ${t.epoch}; the progress names ${body.epoch}`);
      if (t.status !== 'delivered') throw conflict('TASK_NOT_RUNNING', `task ${taskId} is ${t.status}`);
      const redact = this.redactorOf(t);
      const progress: JsonObject = {
        ...(body.percent !== undefined ? { percent: body.percent } : {}),
        ...(body.message !== undefined ? { message: redact.text(body.message) } : {}),
        ...(body.data !== undefined ? { data: redact.json(body.data as JsonObject) } : {}),
        at,
      };
      await this.repo.progress(tx, t.tenant_id, t.task_id, progress);
      const last = this.lastProgress.get(t.task_id) ?? 0;
      const count = await this.repo.progressEvents(tx, t.tenant_id, t.run_id, t.step_id, t.attempt);
      if (Date.now() - last < PROGRESS_EVENT_EVERY_MS || count >= MAX_PROGRESS_EVENTS) return;
      this.lastProgress.set(t.task_id, Date.now());
      if (this.lastProgress.size > 10_000) this.lastProgress.delete(this.lastProgress.keys().next().value!);
      await this.runEvent(tx, t, 'step.progress', `worker:${w.name}`, progress);
    });
  }

  private async runEvent(tx: SystemTx, t: TaskRow, type: string, actor: string, data: JsonObject): Promise<void> {
    const books = new RunBooks(await this.runs.lockRuns(tx, [{ tenantId: t.tenant_id, runId: t.run_id }]));
    const b = books.get(t.tenant_id, t.run_id);
    if (!b) return;
    books.event(b, { type, stepId: t.step_id, attempt: t.attempt, actor, data });
    await this.runs.insertEvents(tx, books.events());
    await this.runs.updateRunBooks(tx, books.updates());
  }

  /**
   * A worker is gone (offline past its TTL, or it left): the tasks it was handed but had not
   * started go back to its pool; the ones it started are orphaned, each failing its attempt
   * (WORKER_LOST, transient: the step's retry policy applies) and counting as a timeout.
   */
  async releaseWorker(tenantId: string, workerId: string, pool: string): Promise<void> {
    const judged: Judged[] = [];
    const lost = await this.store.withResolve(async (tx, resolve) => {
      await this.repo.announceWorker(tx, tenantId, workerId, 'offline');
      await this.repo.unassign(tx, tenantId, workerId);
      const started = await this.repo.deliveredTo(tx, tenantId, workerId);
      for (const t of started) {
        await this.repo.endTask(tx, tenantId, t.task_id, 'orphaned', 'worker_lost', null);
        await this.resolveFailed(resolve, t, null, {
          code: 'WORKER_LOST',
          message: `worker ${t.worker_name ?? workerId} was lost while it held the task`,
          retryable: true,
          class: 'transient',
        });
        if (t.worker_name) judged.push({ tenantId, pool, name: t.worker_name, verdict: 'timeout' });
      }
      await this.repo.wakeDispatch(tx, tenantId, pool);
      return started.length;
    });
    this.judge(judged);
    if (lost > 0) this.log.warn({ tenantId, workerId, orphaned: lost }, 'worker lost: its tasks orphaned');
  }

  /**
   * A task whose deadline passed (its step's timeout after its assignment) fails its attempt
   * (TIMEOUT, transient; a started one counts against its worker); a pending one past its dispatch
   * deadline fails (DISPATCH_TIMEOUT, permanent).
   */
  async overdue(tenantId: string, taskId: string, pool: string): Promise<void> {
    const judged: Judged[] = [];
    await this.store.withResolve(async (tx, resolve) => {
      const t = await this.repo.lockTask(tx, tenantId, pool, taskId);
      if (!t || !['pending', 'assigned', 'delivered'].includes(t.status)) return;
      // Decided from the locked row: since the sweep read it, the task may have gone back to the
      // pool (its deadline cleared) or been assigned (out of its dispatch wait).
      const now = Date.now();
      const timedOut = t.deadline !== null && t.deadline.getTime() <= now;
      const unclaimed = t.status === 'pending' && t.dispatch_deadline !== null && t.dispatch_deadline.getTime() <= now;
      if (!timedOut && !unclaimed) return;
      const error: PluginError = timedOut
        ? { code: 'TIMEOUT', message: 'no result from a worker before the step timeout', retryable: true }
        : {
            code: 'DISPATCH_TIMEOUT',
            message: `no worker took the task within its dispatchTimeout`,
            retryable: false,
          };
      await this.repo.endTask(tx, tenantId, taskId, 'cancelled', timedOut ? 'timeout' : 'dispatch_timeout', null);
      await this.resolveFailed(resolve, t, null, error);
      if (timedOut && t.status === 'delivered' && t.worker_name)
        judged.push({ tenantId, pool, name: t.worker_name, verdict: 'timeout' });
      await this.repo.wakeDispatch(tx, tenantId, pool);
    });
    this.judge(judged);
  }

  /** Verdicts on workers, recorded once the transaction that judged them committed. */
  private judge(judged: Judged[]): void {
    for (const j of judged) this.reputation.record(j.tenantId, j.pool, j.name, j.verdict);
  }

  private async resolveFailed(resolve: Resolve, t: TaskRow, w: KnownWorker | null, error: PluginError): Promise<void> {
    const key = { tenantId: t.tenant_id, runId: t.run_id, stepId: t.step_id, attempt: t.attempt, epoch: t.epoch };
    const now = new Date();
    const result = completionFor(key, 'engine', { status: 'failed', error, logs: [] }, t.delivered_at, now);
    await resolve(result, {
      type: 'step.worker_result',
      data: {
        worker: w?.name ?? t.worker_name,
        pool: t.pool,
        taskType: t.task_type,
        status: 'failed',
        error: { code: error.code, class: error.class ?? (error.retryable ? 'transient' : 'permanent') },
      },
    });
  }
}
