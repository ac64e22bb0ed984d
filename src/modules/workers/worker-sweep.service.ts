import { Inject, Injectable, Logger, type OnApplicationBootstrap, type OnApplicationShutdown } from '@nestjs/common';
import { ORDO_CONFIG } from '../../core/config/config.module';
import type { OrdoConfig } from '../../core/config/config';
import { Database } from '../../core/database/database';
import { metrics } from '../../core/telemetry/metrics';
import { TasksService } from './tasks.service';
import { WorkersRepository } from './workers.repository';

const BATCH = 100;

/**
 * The external workers' sweep (scheduler role, any number of replicas: each statement takes its
 * rows with SKIP LOCKED or under a lock): every ORDO_EXTERNAL_WORKER_SWEEP_MS it marks workers past
 * their TTL offline and releases their tasks, fails tasks past their deadline or dispatch deadline,
 * ends tasks whose step no longer waits (cancelled runs), and dispatches every pool that has
 * pending tasks, in case a wake-up was lost.
 */
@Injectable()
export class WorkerSweepService implements OnApplicationBootstrap, OnApplicationShutdown {
  private readonly log = new Logger('workers');
  private timer: NodeJS.Timeout | null = null;
  private busy: Promise<void> | null = null;

  constructor(
    @Inject(ORDO_CONFIG) private readonly config: OrdoConfig,
    private readonly db: Database,
    private readonly repo: WorkersRepository,
    private readonly tasks: TasksService,
  ) {}

  onApplicationBootstrap(): void {
    this.timer = setInterval(() => {
      if (!this.busy) this.busy = this.sweep().finally(() => (this.busy = null));
    }, this.config.ORDO_EXTERNAL_WORKER_SWEEP_MS);
  }

  async onApplicationShutdown(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    await this.busy;
  }

  async sweep(): Promise<void> {
    try {
      for (let gone = await this.repo.expireWorkers(this.db.system, BATCH); gone.length > 0;) {
        for (const w of gone) await this.tasks.releaseWorker(w.tenant_id, w.worker_id, w.pool);
        gone = await this.repo.expireWorkers(this.db.system, BATCH);
      }
      for (const t of await this.repo.overdue(this.db.system, BATCH))
        await this.tasks.overdue(t.tenant_id, t.task_id, t.pool);
      const stale = await this.repo.cancelStale(this.db.system, BATCH);
      for (const p of uniquePools(stale)) await this.dispatch(p);
      for (const p of await this.repo.pendingPools(this.db.system)) await this.dispatch(p);
    } catch (e) {
      this.log.error({ err: e }, 'external worker sweep failed');
    }
  }

  private async dispatch(p: { tenant_id: string; pool: string }): Promise<void> {
    metrics.taskDispatchesTotal.inc({ by: 'sweep' });
    await this.repo.dispatch(this.db.system, p.tenant_id, p.pool);
  }
}

function uniquePools(rows: { tenant_id: string; pool: string }[]): { tenant_id: string; pool: string }[] {
  const m = new Map(rows.map((r) => [`${r.tenant_id}\u0000${r.pool}`, r]));
  return [...m.values()];
}
