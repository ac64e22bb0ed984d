import { Inject, Injectable, Logger, type OnApplicationShutdown } from '@nestjs/common';
import { ORDO_CONFIG } from '../../core/config/config.module';
import type { OrdoConfig } from '../../core/config/config';
import { Database } from '../../core/database/database';
import { nextReputation, type Reputation, type TaskVerdict } from './reputation';
import { WorkersRepository } from './workers.repository';

/** How long verdicts are gathered before one transaction records them. */
const FLUSH_MS = 200;

interface Pending {
  tenantId: string;
  pool: string;
  name: string;
  verdicts: { verdict: TaskVerdict; at: Date }[];
}

/**
 * Workers' reputations, updated after the results that judge them commit: verdicts are gathered
 * for a fifth of a second and applied in order, per worker name under its row lock, in one
 * transaction, so the results of one busy worker do not queue behind each other's reputation row.
 * A name whose score falls below the floor is blocked in that transaction. Verdicts not yet recorded
 * when a process dies are lost (the outcomes themselves are in the runs).
 */
@Injectable()
export class ReputationBook implements OnApplicationShutdown {
  private readonly log = new Logger('workers');
  private pending = new Map<string, Pending>();
  private timer: NodeJS.Timeout | null = null;
  private flushing: Promise<void> | null = null;

  constructor(
    @Inject(ORDO_CONFIG) private readonly config: OrdoConfig,
    private readonly db: Database,
    private readonly repo: WorkersRepository,
  ) {}

  record(tenantId: string, pool: string, name: string, verdict: TaskVerdict): void {
    const k = JSON.stringify([tenantId, pool, name]);
    let p = this.pending.get(k);
    if (!p) this.pending.set(k, (p = { tenantId, pool, name, verdicts: [] }));
    p.verdicts.push({ verdict, at: new Date() });
    this.timer ??= setTimeout(() => {
      this.timer = null;
      this.flushing = (this.flushing ?? Promise.resolve()).then(() => this.flush());
    }, FLUSH_MS);
  }

  /** Records what is gathered now (tests and shutdown). */
  async settled(): Promise<void> {
    if (this.timer) {
      clearTimeout(this.timer);
      this.timer = null;
    }
    await this.flushing;
    await this.flush();
  }

  async onApplicationShutdown(): Promise<void> {
    await this.settled();
  }

  private async flush(): Promise<void> {
    const batch = [...this.pending.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([, p]) => p);
    this.pending = new Map();
    if (batch.length === 0) return;
    const floor = this.config.ORDO_EXTERNAL_WORKER_REPUTATION_FLOOR;
    const halfLife = this.config.ORDO_EXTERNAL_WORKER_REPUTATION_HALF_LIFE_MS;
    try {
      await this.db.withSystem(async (tx) => {
        for (const p of batch) {
          const row = await this.repo.lockReputation(tx, p.tenantId, p.pool, p.name);
          let r: Reputation & { updatedAt: Date } = { ...row, updatedAt: row.updated_at };
          for (const v of p.verdicts) r = { ...nextReputation(r, v.verdict, v.at, halfLife), updatedAt: v.at };
          await this.repo.saveReputation(tx, p.tenantId, p.pool, p.name, { ...r, block: r.score < floor });
        }
      });
    } catch (e) {
      this.log.warn({ err: e, names: batch.length }, 'recording worker reputations failed');
    }
  }
}
