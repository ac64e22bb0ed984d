import { Injectable } from '@nestjs/common';
import { sql } from 'kysely';
import type { SystemDb } from '../../core/database/handles';

/** A tenant whose finished runs retention removes once they ended before `cutoff`. */
export interface RetentionPolicy {
  tenantId: string;
  cutoff: Date;
  requiresExport: boolean;
}

/** What ordo_retention_drop_month answered for one month. */
export interface MonthDrop {
  dropped: boolean;
  partitions: string[];
  tenants: string[];
  /** The first tenant that still needs a row of the month (not dropped). */
  heldBy?: string;
  reason?: string;
  /** From the first DETACH to the function's end: the parents' ACCESS EXCLUSIVE locks are held that long, plus the commit. */
  lockedMs?: number;
}

/**
 * Retention's statements (system handle; each its own transaction): the SQL lives in
 * db/functions/ordo_partitions_ensure.sql, ordo_retention_purge.sql and ordo_retention_drop_month.sql.
 */
@Injectable()
export class RetentionRepository {
  /** Makes the month partitions up to `monthsAhead` ahead (and any month with rows in a default partition); the partitions made. */
  async ensurePartitions(db: SystemDb, monthsAhead: number): Promise<string[]> {
    const { rows } = await sql<{
      made: string[];
    }>`select ordo_partitions_ensure(${monthsAhead}::integer) as made`.execute(db);
    return rows[0].made;
  }

  /**
   * Each tenant's retention days: its plan's effective retentionDays (ordo_tenant_limits), else
   * `defaultDays`; tenants with neither are left out (their runs are kept).
   */
  async retentionDays(db: SystemDb, defaultDays: number | null): Promise<{ tenantId: string; days: number }[]> {
    const { rows } = await sql<{ tenant_id: string; days: number }>`
      select t.id as tenant_id, coalesce((l.limits->>'retentionDays')::integer, ${defaultDays}::integer) as days
      from tenant t left join lateral ordo_tenant_limits(t.id) l on true
      where coalesce((l.limits->>'retentionDays')::integer, ${defaultDays}::integer) is not null
      order by t.id`.execute(db);
    return rows.map((r) => ({ tenantId: r.tenant_id, days: r.days }));
  }

  /** The first instants (UTC) of the months that have a run_event, attempt or span partition and ended before this month. */
  async endedMonths(db: SystemDb): Promise<Date[]> {
    const { rows } = await sql<{ month: Date }>`
      select distinct to_timestamp(substring(c.relname from '_p(\\d{4}_\\d{2})$'), 'YYYY_MM') at time zone 'UTC'
        at time zone 'UTC' as month
      from pg_inherits i
      join pg_class c on c.oid = i.inhrelid
      where i.inhparent in ('public.run_event'::regclass, 'public.attempt'::regclass, 'public.span'::regclass)
        and c.relname ~ '_p\\d{4}_\\d{2}$'
      order by 1`.execute(db);
    const current = Date.UTC(new Date().getUTCFullYear(), new Date().getUTCMonth(), 1);
    return rows.map((r) => new Date(r.month)).filter((m) => m.getTime() < current);
  }

  /** Drops the month's partitions when no tenant needs them (ordo_retention_drop_month). */
  async dropMonth(db: SystemDb, month: Date, policies: RetentionPolicy[]): Promise<MonthDrop> {
    const p = JSON.stringify(
      policies.map((x) => ({ tenantId: x.tenantId, cutoff: x.cutoff.toISOString(), requiresExport: x.requiresExport })),
    );
    const { rows } = await sql<{ r: MonthDrop }>`
      select ordo_retention_drop_month(${month.toISOString()}::timestamptz, ${p}::jsonb) as r`.execute(db);
    return rows[0].r;
  }

  /** Deletes one batch of up to `limit` of the tenant's expired runs (ordo_retention_purge); the runs deleted. */
  async purge(db: SystemDb, p: RetentionPolicy, limit: number): Promise<number> {
    const { rows } = await sql<{ n: number }>`
      select ordo_retention_purge(${p.tenantId}, ${p.cutoff.toISOString()}::timestamptz, ${p.requiresExport},
        ${limit}::integer) as n`.execute(db);
    return rows[0].n;
  }

  /**
   * Deletes the tenant's artifact candidates' artifacts that nothing of the tenant names any more
   * (ordo_retention_sweep_artifacts); the artifacts deleted.
   */
  async sweepArtifacts(db: SystemDb, tenantId: string): Promise<number> {
    const { rows } = await sql<{ n: number }>`select ordo_retention_sweep_artifacts(${tenantId}) as n`.execute(db);
    return rows[0].n;
  }
}
