import { Inject, Injectable, type OnApplicationShutdown, type OnModuleInit } from '@nestjs/common';
import { ORDO_CONFIG } from '../../core/config/config.module';
import type { OrdoConfig } from '../../core/config/config';
import { Database } from '../../core/database/database';
import { rootLogger } from '../../core/logging/logger';
import { LimitHitsRepository } from './limit-hits.repository';

/** How often the scheduler role deletes old limit hits and closed limiter windows. */
export const LIMIT_RETENTION_INTERVAL_MS = 5 * 60_000;
/** How long after its window closed a limiter counter is kept. */
const COUNTER_GRACE_MS = 60_000;

/**
 * The scheduler role's sweep of the limiter's tables: limit_hit minutes older than a day and
 * rate_limit counters whose window closed (PostgreSQL store; Redis expires its keys itself).
 * Every scheduler replica may sweep: the deletes are idempotent.
 */
@Injectable()
export class LimitRetention implements OnModuleInit, OnApplicationShutdown {
  private readonly log = rootLogger().child({ component: 'limit-hits' });
  private timer?: NodeJS.Timeout;

  constructor(
    @Inject(ORDO_CONFIG) private readonly config: OrdoConfig,
    private readonly db: Database,
    private readonly repo: LimitHitsRepository,
  ) {}

  onModuleInit(): void {
    if (!this.config.ORDO_ROLES.includes('scheduler')) return;
    this.timer = setInterval(() => {
      this.sweep().catch((e: unknown) => this.log.warn({ err: e }, 'limit retention sweep failed'));
    }, LIMIT_RETENTION_INTERVAL_MS);
    this.timer.unref();
  }

  onApplicationShutdown(): void {
    clearInterval(this.timer);
  }

  /** Deletes what is past retention; the rows deleted from each table. */
  async sweep(): Promise<{ limitHits: number; counters: number }> {
    const limitHits = await this.repo.deleteOld(this.db.system);
    const counters = await this.repo.deleteExpiredCounters(this.db.system, Date.now() - COUNTER_GRACE_MS);
    return { limitHits, counters };
  }
}
