import { Injectable, Logger, type OnApplicationBootstrap, type OnApplicationShutdown } from '@nestjs/common';
import type { Runner, TaskList } from 'graphile-worker';
import pg from 'pg';
import { Database } from '../../core/database/database';
import { ConstraintsService } from './constraints.service';
import { EngineStore } from './engine.store';
import { JOBS } from './jobs';

/**
 * Runs graphile-worker in this process (system role) for the engine's jobs: retry timers and
 * constraint webhooks. Started and stopped with the application.
 */
const UNLOCK_SWEEP_MS = 30_000;
const ABANDONED_LOCK = '2 minutes';

@Injectable()
export class JobRunnerService implements OnApplicationBootstrap, OnApplicationShutdown {
  private readonly log = new Logger('jobs');
  private runner: Runner | null = null;
  private pool: pg.Pool | null = null;
  private unlockTimer: NodeJS.Timeout | null = null;

  constructor(
    private readonly db: Database,
    private readonly store: EngineStore,
    private readonly constraints: ConstraintsService,
  ) {}

  async onApplicationBootstrap(): Promise<void> {
    const { run, Logger: GwLogger } = await import('graphile-worker');
    const taskList: TaskList = {
      'ordo.engine.retry_step': async (payload) =>
        this.store.requeue(JOBS['ordo.engine.retry_step'].payload.parse(payload)),
      'ordo.engine.webhook': async (payload) =>
        this.constraints.deliver(JOBS['ordo.engine.webhook'].payload.parse(payload)),
    };
    // Our own pool, so a connection dropped by the server (restart, pg_terminate_backend) is
    // an event the pool recovers from, never an unhandled 'error' that ends the process.
    this.pool = new pg.Pool({ connectionString: this.db.urls.system, max: 6, application_name: 'ordo:jobs' });
    this.pool.on('error', (e) => this.log.warn({ err: e.message }, 'job runner connection lost'));
    // A checked-out client that loses its connection reports it here instead of throwing.
    this.pool.on('connect', (client) => {
      client.on('error', (e) => this.log.warn({ err: e.message }, 'job runner connection lost'));
    });
    this.runner = await run({
      pgPool: this.pool,
      concurrency: 4,
      noHandleSignals: true,
      pollInterval: 2_000,
      // Completions and failures go through graphile-worker's batcher, which retries a lost
      // connection with backoff; unbatched, a failJob/completeJob that loses its connection is an
      // unhandled rejection that ends the process and leaves the job locked for hours.
      preset: { worker: { completeJobBatchDelay: 0, failJobBatchDelay: 0 } },
      taskList,
      logger: new GwLogger((scope) => (level, message) => {
        if (level === 'error') this.log.error({ scope }, message);
        else if (level === 'warning') this.log.warn({ scope }, message);
      }),
    });
    this.unlockTimer = setInterval(() => void this.unlockAbandoned(), UNLOCK_SWEEP_MS);
  }

  /**
   * graphile-worker keeps a job locked by a process that died mid-job (SIGKILL, crash) for 4 hours.
   * The engine's jobs take seconds (webhooks time out after 10 s) and are safe to run again, so
   * one locked for longer than ABANDONED_LOCK is released for another runner.
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

  async onApplicationShutdown(): Promise<void> {
    if (this.unlockTimer) clearInterval(this.unlockTimer);
    const r = this.runner;
    this.runner = null;
    await r?.stop();
    const p = this.pool;
    this.pool = null;
    await p?.end();
  }
}
