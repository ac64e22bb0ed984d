import { Injectable, type OnApplicationShutdown, type OnModuleInit } from '@nestjs/common';
import { Database } from '../../core/database/database';
import { DomainError } from '../../core/errors/domain-error';
import { rootLogger } from '../../core/logging/logger';
import { LimitHitsRepository, type LimitHitRow } from './limit-hits.repository';

/** How often each process writes the hits it counted. */
export const LIMIT_HITS_FLUSH_MS = 1_000;
/** Distinct (tenant, limit, minute) counts a process holds while the database does not take them; more are dropped. */
const MAX_PENDING = 10_000;
/** The refusals that are limit hits. */
const LIMIT_CODES = new Set(['RATE_LIMITED', 'QUOTA_EXCEEDED']);
const LIMIT_NAME = /^[A-Za-z][A-Za-z0-9_.-]{0,62}$/;

/** A tenant's hits of one limit counted by this process since it started. */
export interface LimitHitTotal {
  tenantId: string;
  limitName: string;
  hits: number;
}

/**
 * Counts the limits tenants hit (every RATE_LIMITED and QUOTA_EXCEEDED refusal) in memory and adds
 * them once a second to limit_hit, per tenant, limit and minute (the operator's view and the
 * metrics read that table). A count the database refused is kept for the next flush; the process's
 * own running totals are in `totals`.
 */
@Injectable()
export class LimitHits implements OnModuleInit, OnApplicationShutdown {
  private readonly log = rootLogger().child({ component: 'limit-hits' });
  private pending = new Map<string, LimitHitRow>();
  private readonly running = new Map<string, LimitHitTotal>();
  private readonly counted = new WeakSet<DomainError>();
  private timer?: NodeJS.Timeout;
  private flushing: Promise<void> = Promise.resolve();

  constructor(
    private readonly db: Database,
    private readonly repo: LimitHitsRepository,
  ) {}

  onModuleInit(): void {
    this.timer = setInterval(() => void this.flush(), LIMIT_HITS_FLUSH_MS);
    this.timer.unref();
  }

  async onApplicationShutdown(): Promise<void> {
    clearInterval(this.timer);
    await this.flush();
  }

  /** Counts one hit of `limitName` by `tenantId` now. */
  record(tenantId: string, limitName: string): void {
    const name = LIMIT_NAME.test(limitName) ? limitName : 'unknown';
    const minute = new Date(Math.floor(Date.now() / 60_000) * 60_000);
    const key = `${tenantId}\u0000${name}\u0000${minute.getTime()}`;
    const row = this.pending.get(key);
    if (row) row.hits++;
    else if (this.pending.size < MAX_PENDING) this.pending.set(key, { tenantId, limitName: name, minute, hits: 1 });
    const tk = `${tenantId}\u0000${name}`;
    const t = this.running.get(tk);
    if (t) t.hits++;
    else this.running.set(tk, { tenantId, limitName: name, hits: 1 });
  }

  /**
   * Counts a refusal of `tenantId` if it is a limit hit (RATE_LIMITED or QUOTA_EXCEEDED, with the
   * limit's name in `details.limit`). Each error counts once, however many places see it.
   */
  recordError(tenantId: string, e: unknown): void {
    if (!(e instanceof DomainError) || !LIMIT_CODES.has(e.code) || this.counted.has(e)) return;
    this.counted.add(e);
    const limit = (e.details as { limit?: unknown } | undefined)?.limit;
    this.record(tenantId, typeof limit === 'string' ? limit : 'unknown');
  }

  /** Hits counted by this process since it started, per tenant and limit. */
  totals(): LimitHitTotal[] {
    return [...this.running.values()].map((t) => ({ ...t }));
  }

  /** Writes the hits counted so far (one flush at a time). */
  flush(): Promise<void> {
    this.flushing = this.flushing.then(() => this.write());
    return this.flushing;
  }

  private async write(): Promise<void> {
    if (this.pending.size === 0) return;
    const batch = this.pending;
    this.pending = new Map();
    try {
      await this.repo.add(this.db.system, [...batch.values()]);
    } catch (e) {
      this.log.warn({ err: e }, 'limit hits not written; kept for the next flush');
      for (const [k, r] of batch) {
        const now = this.pending.get(k);
        if (now) now.hits += r.hits;
        else if (this.pending.size < MAX_PENDING) this.pending.set(k, r);
      }
    }
  }
}
