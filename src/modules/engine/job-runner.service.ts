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
@Injectable()
export class JobRunnerService implements OnApplicationBootstrap, OnApplicationShutdown {
  private readonly log = new Logger('jobs');
  private runner: Runner | null = null;
  private pool: pg.Pool | null = null;

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
      taskList,
      logger: new GwLogger((scope) => (level, message) => {
        if (level === 'error') this.log.error({ scope }, message);
        else if (level === 'warning') this.log.warn({ scope }, message);
      }),
    });
  }

  async onApplicationShutdown(): Promise<void> {
    const r = this.runner;
    this.runner = null;
    await r?.stop();
    const p = this.pool;
    this.pool = null;
    await p?.end();
  }
}
