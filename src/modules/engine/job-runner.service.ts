import { Injectable, Logger, type OnApplicationBootstrap, type OnApplicationShutdown } from '@nestjs/common';
import { EventEmitter } from 'node:events';
import type { Runner, TaskList, WorkerEvents } from 'graphile-worker';
import pg from 'pg';
import { Database } from '../../core/database/database';
import { queryThroughCallbacks } from '../../core/database/pg-query';
import { ApprovalsService } from './approvals.service';
import { SubDagsService } from './sub-dags.service';
import { ConstraintsService } from './constraints.service';
import { EngineStore } from './engine.store';
import { JOBS } from './jobs';
import { SignalsService } from './signals.service';
import { PreconditionsService } from './preconditions.service';

/** How often locks older than ABANDONED_LOCK are released: a job is held at most about a minute. */
const UNLOCK_SWEEP_MS = 10_000;
const ABANDONED_LOCK = '45 seconds';

/**
 * Runs graphile-worker in this process (system role) for the engine's jobs: retry timers, waiting
 * steps' timeouts, scheduled runs' starts, precondition checks and constraint webhooks. Started and stopped with the application.
 */

@Injectable()
export class JobRunnerService implements OnApplicationBootstrap, OnApplicationShutdown {
  private readonly log = new Logger('jobs');
  private runner: Runner | null = null;
  private pool: pg.Pool | null = null;
  private unlockTimer: NodeJS.Timeout | null = null;
  private restartTimer: NodeJS.Timeout | null = null;
  private restarts = 0;
  private stopping = false;
  /** The worker ids of runners that stopped on their own: their jobs are released at the next start. */
  private stoppedWorkers: string[] = [];
  /** The worker ids of the running runner. */
  private workers = new Set<string>();

  constructor(
    private readonly db: Database,
    private readonly store: EngineStore,
    private readonly constraints: ConstraintsService,
    private readonly approvals: ApprovalsService,
    private readonly signals: SignalsService,
    private readonly preconditions: PreconditionsService,
    private readonly subDags: SubDagsService,
  ) {}

  async onApplicationBootstrap(): Promise<void> {
    // Our own pool, so a connection dropped by the server (restart, pg_terminate_backend) is
    // an event the pool recovers from, never an unhandled 'error' that ends the process.
    this.pool = new pg.Pool({ connectionString: this.db.urls.system, max: 6, application_name: 'ordo:jobs' });
    this.pool.on('error', (e) => this.log.warn({ err: e.message }, 'job runner connection lost'));
    // A checked-out client that loses its connection reports it here instead of throwing.
    this.pool.on('connect', (client) => {
      client.on('error', (e) => this.log.warn({ err: e.message }, 'job runner connection lost'));
      queryThroughCallbacks(client);
    });
    await this.start();
    this.unlockTimer = setInterval(() => void this.unlockAbandoned(), UNLOCK_SWEEP_MS);
  }

  /**
   * Starts graphile-worker's runner and supervises it: a runner that stops while the application
   * is not shutting down (its batcher gives up on the first lost connection when recording a job's
   * result, and then the whole runner stops) is started again on the same pool after a pause, so
   * retry timers and webhooks keep running after a database restart. The jobs the stopped runner
   * held stay locked by its workers, which will never record them: they are released when the
   * runner starts again (graphile-worker's force_unlock_workers for those worker ids), not hours
   * later. A job still being tried by a stopped runner's task may then run twice: the engine's jobs
   * are safe to run again (a requeue of a step that is no longer retrying does nothing; webhooks
   * are delivered at least once anyway, each naming its run and event number).
   */
  private async start(): Promise<void> {
    const { run, Logger: GwLogger } = await import('graphile-worker');
    if (this.stoppedWorkers.length > 0) {
      try {
        await this.pool!.query('select graphile_worker.force_unlock_workers($1::text[])', [this.stoppedWorkers]);
        this.stoppedWorkers = [];
      } catch (e) {
        // Still unreachable: the runner cannot start either (tried again below).
        this.log.warn({ err: (e as Error).message }, "releasing the stopped runner's jobs failed");
      }
    }
    // The runner's workers, as graphile-worker creates them (events passed in, so none is missed).
    const workers = (this.workers = new Set<string>());
    const events = new EventEmitter() as WorkerEvents;
    events.on('worker:create', ({ worker }) => workers.add(worker.workerId));
    const taskList: TaskList = {
      'ordo.engine.retry_step': async (payload) =>
        retryWhileDisconnected(() => this.store.requeue(JOBS['ordo.engine.retry_step'].payload.parse(payload))),
      'ordo.engine.step_timeout': async (payload) =>
        retryWhileDisconnected(async () => {
          const p = JOBS['ordo.engine.step_timeout'].payload.parse(payload);
          if (!(await this.signals.timeout(p))) await this.approvals.timeout(p);
        }),
      'ordo.engine.signal_wait': async (payload) =>
        retryWhileDisconnected(() => this.signals.waiting(JOBS['ordo.engine.signal_wait'].payload.parse(payload))),
      'ordo.engine.start_run': async (payload) =>
        retryWhileDisconnected(() => this.store.startScheduled(JOBS['ordo.engine.start_run'].payload.parse(payload))),
      'ordo.engine.precondition_check': async (payload) =>
        retryWhileDisconnected(() =>
          this.preconditions.check(JOBS['ordo.engine.precondition_check'].payload.parse(payload)),
        ),
      'ordo.engine.child_ended': async (payload) =>
        retryWhileDisconnected(() => this.subDags.childEnded(JOBS['ordo.engine.child_ended'].payload.parse(payload))),
      'ordo.engine.webhook': async (payload) =>
        retryWhileDisconnected(() => this.constraints.deliver(JOBS['ordo.engine.webhook'].payload.parse(payload))),
    };
    let runner: Runner;
    try {
      runner = await run({
        pgPool: this.pool!,
        concurrency: 4,
        noHandleSignals: true,
        pollInterval: 2_000,
        // Completions and failures go through graphile-worker's batcher; unbatched, a
        // failJob/completeJob that loses its connection is an unhandled rejection that ends the
        // process and leaves the job locked for hours.
        preset: { worker: { completeJobBatchDelay: 0, failJobBatchDelay: 0 } },
        taskList,
        events,
        logger: new GwLogger((scope) => (level, message) => {
          if (level === 'error') this.log.error({ scope }, message);
          else if (level === 'warning') this.log.warn({ scope }, message);
        }),
      });
    } catch (e) {
      // The database is not reachable yet: try again later (readiness reports the database).
      this.restartLater(e);
      return;
    }
    this.runner = runner;
    this.restarts = 0;
    const settled = (e?: unknown) => {
      if (this.runner === runner) this.runner = null;
      this.stoppedWorkers.push(...workers);
      if (!this.stopping) this.restartLater(e ?? new Error('runner stopped'));
    };
    runner.promise.then(
      () => settled(),
      (e: unknown) => settled(e),
    );
  }

  private restartLater(e: unknown): void {
    if (this.stopping || this.restartTimer) return;
    const delay = Math.min(30_000, 500 * 2 ** Math.min(this.restarts++, 6));
    this.log.warn({ err: e instanceof Error ? e.message : e, retryInMs: delay }, 'job runner stopped; restarting');
    this.restartTimer = setTimeout(() => {
      this.restartTimer = null;
      if (!this.stopping) void this.start();
    }, delay);
  }

  /**
   * graphile-worker keeps a job locked by a process that died mid-job (SIGKILL, crash) for 4 hours,
   * and a runner whose connection was lost while it recorded a result may keep one locked too. The
   * engine's jobs take seconds (webhooks time out after 10 s) and are safe to run again, so one
   * locked for longer than ABANDONED_LOCK is released for another runner.
   */
  private async unlockAbandoned(): Promise<void> {
    try {
      await this.pool?.query(
        `update graphile_worker._private_jobs j set locked_at = null, locked_by = null
           from graphile_worker._private_tasks t
          where t.id = j.task_id and t.identifier like 'ordo.engine.%'
            and j.locked_at < now() - interval '${ABANDONED_LOCK}'`,
      );
    } catch (e) {
      this.log.warn({ err: (e as Error).message }, 'releasing abandoned job locks failed');
    }
  }

  /** The worker ids of the running runner (the `locked_by` of the jobs it holds). */
  workerIds(): string[] {
    return [...this.workers];
  }

  async onApplicationShutdown(): Promise<void> {
    this.stopping = true;
    if (this.unlockTimer) clearInterval(this.unlockTimer);
    if (this.restartTimer) clearTimeout(this.restartTimer);
    const r = this.runner;
    this.runner = null;
    // Only a runner still running is stopped (one that stopped on its own has nothing to stop).
    await r?.stop().catch((e: unknown) => this.log.warn({ err: (e as Error).message }, 'job runner stop'));
    const p = this.pool;
    this.pool = null;
    await p?.end();
  }
}

/** A lost connection (server restart, terminated backend, refused connection): worth trying again. */
function isConnectionError(e: unknown): boolean {
  const err = e as { code?: unknown; message?: unknown };
  const code = typeof err?.code === 'string' ? err.code : '';
  return (
    code.startsWith('08') ||
    code.startsWith('57P0') ||
    code === 'ECONNREFUSED' ||
    code === 'ECONNRESET' ||
    (typeof err?.message === 'string' &&
      /Connection terminated|connection ended|Client has encountered a connection error/i.test(err.message))
  );
}

/**
 * Runs a job's work, trying again in the process while the database is unreachable (250 ms
 * doubling to 2 s, for up to about 30 s) before the job fails: a failed job waits graphile-worker's
 * own backoff (seconds to minutes), which would hold a retry timer back long after an outage.
 */
export async function retryWhileDisconnected<T>(fn: () => Promise<T>, budgetMs = 30_000): Promise<T> {
  const deadline = Date.now() + budgetMs;
  for (let delay = 250; ; delay = Math.min(2_000, delay * 2)) {
    try {
      return await fn();
    } catch (e) {
      if (!isConnectionError(e) || Date.now() + delay > deadline) throw e;
      await new Promise((r) => setTimeout(r, delay));
    }
  }
}
