import { Injectable } from '@nestjs/common';
import { sql } from 'kysely';
import type { SystemDb } from '../../core/database/handles';

/** Hits of one limit by one tenant in one minute. */
export interface LimitHitRow {
  tenantId: string;
  limitName: string;
  /** The minute's start. */
  minute: Date;
  hits: number;
}

/** How long limit_hit keeps a minute. */
export const LIMIT_HIT_RETENTION = '1 day';

/** limit_hit (per tenant, limit and minute) and the retention of the limiter's tables. System handle only. */
@Injectable()
export class LimitHitsRepository {
  /**
   * Adds `rows` to their minutes in one statement. Rows go in key order, so that replicas adding to
   * the same minutes at once lock them in the same order.
   */
  async add(db: SystemDb, rows: LimitHitRow[]): Promise<void> {
    if (rows.length === 0) return;
    const sorted = [...rows].sort(
      (a, b) => cmp(a.tenantId, b.tenantId) || cmp(a.limitName, b.limitName) || a.minute.getTime() - b.minute.getTime(),
    );
    await sql`
      insert into limit_hit (tenant_id, limit_name, minute, hits)
      select * from unnest(
        ${sorted.map((r) => r.tenantId)}::text[],
        ${sorted.map((r) => r.limitName)}::text[],
        ${sorted.map((r) => r.minute.toISOString())}::timestamptz[],
        ${sorted.map((r) => r.hits)}::bigint[]
      )
      on conflict (tenant_id, limit_name, minute) do update set hits = limit_hit.hits + excluded.hits`.execute(db);
  }

  /** Deletes minutes older than LIMIT_HIT_RETENTION; the number deleted. */
  async deleteOld(db: SystemDb): Promise<number> {
    const r = await sql`delete from limit_hit where minute < now() - ${LIMIT_HIT_RETENTION}::interval`.execute(db);
    return Number(r.numAffectedRows ?? 0);
  }

  /** Deletes the limiter's counters whose window closed before `beforeMs` (epoch ms); the number deleted. */
  async deleteExpiredCounters(db: SystemDb, beforeMs: number): Promise<number> {
    const r = await sql`delete from rate_limit where expire < ${beforeMs}`.execute(db);
    return Number(r.numAffectedRows ?? 0);
  }
}

const cmp = (a: string, b: string): number => (a < b ? -1 : a > b ? 1 : 0);
