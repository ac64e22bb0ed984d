import { Injectable } from '@nestjs/common';
import { sql } from 'kysely';
import { tenantOf, type TenantTx } from '../../core/database/handles';

export interface ExportRange {
  from?: Date;
  to?: Date;
  dagId?: string;
}

/** Position of a run in export order: (startedUtc, dagId, runId); startedUtc falls back to creation. */
export interface RunKey {
  startedAt: Date;
  dagId: string;
  runId: string;
}

/**
 * A run's startedUtc as the export writes it: to the millisecond (UTC), so the order of the rows is
 * the order a verifier sees, runs started in the same millisecond by different transactions
 * included, and a page's last key (a Date) matches its row exactly. Indexed by run_export_ms_idx.
 */
const startedUtc = sql<Date>`(date_trunc('milliseconds', coalesce(started_at, created_at) at time zone 'UTC') at time zone 'UTC')`;
const startedUtcKey = sql`date_trunc('milliseconds', coalesce(started_at, created_at) at time zone 'UTC')`;
const utc = (d: Date) => sql`(${d.toISOString()}::timestamptz at time zone 'UTC')`;

@Injectable()
export class ExportRepository {
  /** The database's clock: when an export starts, in the same clock as the runs' times. */
  async now(tx: TenantTx): Promise<Date> {
    const { rows } = await sql<{ now: Date }>`select now() as now`.execute(tx);
    return rows[0].now;
  }

  /**
   * Records an export that reached its manifest, with its range: retention with
   * ORDO_RETENTION_REQUIRES_EXPORT removes the runs it holds that had ended before it started
   * (db/functions/ordo_retention_keeps.sql).
   */
  async recordExport(tx: TenantTx, startedAt: Date, range: ExportRange, runs: number): Promise<void> {
    await tx
      .insertInto('run_export')
      .values({
        tenant_id: tenantOf(tx),
        started_at: startedAt,
        range_from: range.from ?? null,
        range_to: range.to ?? null,
        dag_id: range.dagId ?? null,
        runs,
      })
      .execute();
  }

  /** The next page of runs in export order after `after`, within the range. */
  async runsPage(tx: TenantTx, range: ExportRange, after: RunKey | undefined, limit: number) {
    let q = tx
      .selectFrom('run')
      .select([
        'run_id',
        'dag_id',
        'dag_version',
        'content_hash',
        'run_token',
        'inputs',
        'inputs_hash',
        'status',
        'reason',
        'trace_id',
        'requested_by',
        'replay_of',
        'rerun_of',
        'rerun_from_step',
        'priority',
        'not_before',
        'parent_run_id',
        'parent_step_id',
        'created_at',
        'started_at',
        'finished_at',
        'steps_total',
        'steps_failed',
        'event_seq',
        'event_hash',
        'outputs_hash',
        startedUtc.as('started_utc'),
      ])
      .where('tenant_id', '=', tenantOf(tx));
    if (range.from) q = q.where(sql<boolean>`${startedUtcKey} >= ${utc(range.from)}`);
    if (range.to) q = q.where(sql<boolean>`${startedUtcKey} < ${utc(range.to)}`);
    if (range.dagId) q = q.where('dag_id', '=', range.dagId);
    if (after) {
      q = q.where(
        sql<boolean>`(${startedUtcKey}, dag_id collate "C", run_id) > (${utc(after.startedAt)}, ${after.dagId}, ${after.runId}::uuid)`,
      );
    }
    // Byte order ("C") for dag ids: the order an offline verifier can check without the server's collation.
    return q
      .orderBy(startedUtcKey)
      .orderBy(sql`dag_id collate "C"`)
      .orderBy('run_id')
      .limit(limit)
      .execute();
  }

  async steps(tx: TenantTx, runIds: string[]) {
    if (runIds.length === 0) return [];
    return tx
      .selectFrom('step')
      .select([
        'run_id',
        'step_id',
        'status',
        'reason',
        'plugin',
        'config',
        'depends_on',
        'topo_index',
        'dispatch_seq',
        'attempts',
        'named_status',
        'outputs_hash',
        'logs_hash',
        'error',
        'from_rerun',
        'queued_at',
        'started_at',
        'finished_at',
      ])
      .where('tenant_id', '=', tenantOf(tx))
      .where('run_id', 'in', runIds)
      .orderBy('run_id')
      .orderBy('topo_index')
      .orderBy('step_id')
      .execute();
  }

  async attempts(tx: TenantTx, runIds: string[]) {
    if (runIds.length === 0) return [];
    return tx
      .selectFrom('attempt')
      .select([
        'run_id',
        'step_id',
        'attempt',
        'created_at',
        'epoch',
        'worker_id',
        'status',
        'traceparent',
        'queued_at',
        'claimed_at',
        'condition_pending_at',
        'constraint_checked_at',
        'started_at',
        'finished_at',
        'terminated_at',
        'error',
        'outputs_hash',
        'logs_hash',
      ])
      .where('tenant_id', '=', tenantOf(tx))
      .where('run_id', 'in', runIds)
      .orderBy('run_id')
      .orderBy('step_id')
      .orderBy('attempt')
      .orderBy('created_at')
      .execute();
  }

  /** Log artifacts referenced by the attempts of these runs (one row per distinct log blob). */
  async logs(tx: TenantTx, runIds: string[]) {
    if (runIds.length === 0) return [];
    const t = tenantOf(tx);
    const r = await sql<{
      run_id: string;
      step_id: string;
      attempt: number;
      sha256: string;
      media_type: string;
      size: number;
      body_json: unknown;
      body_bytes: Buffer | null;
    }>`
      select a.run_id, a.step_id, a.attempt, l.sha256, l.media_type, l.size, l.body_json, l.body_bytes
      from attempt a
      cross join lateral (
        select f.sha256, f.media_type, f.size, f.body_json, f.body_bytes
        from artifact f
        where f.tenant_id = a.tenant_id and f.sha256 = a.logs_hash
        order by f.created_on
        limit 1
      ) l
      where a.tenant_id = ${t} and a.run_id = any(${runIds}::uuid[]) and a.logs_hash is not null
      order by a.run_id, a.step_id, a.attempt, a.created_at`.execute(tx);
    return r.rows;
  }

  async spans(tx: TenantTx, runIds: string[]) {
    if (runIds.length === 0) return [];
    return tx
      .selectFrom('span')
      .select([
        'run_id',
        'trace_id',
        'span_id',
        'parent_span_id',
        'name',
        'kind',
        'step_id',
        'started_at',
        'ended_at',
        'status_code',
        'status_message',
        'attributes',
      ])
      .where('tenant_id', '=', tenantOf(tx))
      .where('run_id', 'in', runIds)
      .orderBy('run_id')
      .orderBy('started_at')
      .orderBy('span_id')
      .execute();
  }

  /** A run's events after `afterSeq` up to `lastSeq` (the run row's count when it was read), in order. */
  async events(tx: TenantTx, runId: string, afterSeq: number, lastSeq: number, limit: number) {
    return tx
      .selectFrom('run_event')
      .select(['seq', 'created_at', 'type', 'step_id', 'attempt', 'actor', 'data', 'prev_hash', 'hash'])
      .where('tenant_id', '=', tenantOf(tx))
      .where('run_id', '=', runId)
      .where('seq', '>', afterSeq)
      .where('seq', '<=', lastSeq)
      .orderBy('seq')
      .limit(limit)
      .execute();
  }
}
