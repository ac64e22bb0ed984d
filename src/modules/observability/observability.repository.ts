import { Injectable } from '@nestjs/common';
import { sql } from 'kysely';
import type { SystemDb } from '../../core/database/handles';
import type { LimitHitRow, ReadyQueue } from './queue-metrics';

export interface StoredSpan {
  tenantId: string;
  traceId: string;
  spanId: string;
  parentSpanId: string | null;
  name: string;
  kind: number;
  runId: string | null;
  stepId: string | null;
  startedAt: Date;
  endedAt: Date;
  statusCode: number;
  statusMessage: string | null;
  attributes: Record<string, unknown>;
}

@Injectable()
export class ObservabilityRepository {
  /**
   * Every tenant queue's ready steps and the age of its oldest (by the database's clock): one
   * grouped scan of the (small) hot queue, system handle.
   */
  async readyQueues(db: SystemDb): Promise<ReadyQueue[]> {
    const { rows } = await sql<{ tenant_id: string; depth: number; oldest_seconds: number }>`
      select qi.tenant_id, count(*) as depth, extract(epoch from now() - min(qi.enqueued_at))::float8 as oldest_seconds
      from queue_item qi
      where qi.state = 'ready'
      group by qi.tenant_id
    `.execute(db);
    return rows.map((r) => ({
      tenant: r.tenant_id,
      depth: Number(r.depth),
      oldestSeconds: Math.max(0, Number(r.oldest_seconds)),
    }));
  }

  /** The limit_hit rows of the minutes from `since` on (its index on minute), and the database's clock. */
  async limitHitsSince(db: SystemDb, since: Date): Promise<{ rows: LimitHitRow[]; now: Date }> {
    const { rows } = await sql<{ tenant_id: string; limit_name: string; minute: Date; hits: number; now: Date }>`
      select lh.tenant_id, lh.limit_name, lh.minute, lh.hits, c.now
      from (select now() as now) c
      left join limit_hit lh on lh.minute >= ${since}
    `.execute(db);
    return {
      now: rows[0].now,
      rows: rows
        .filter((r) => r.tenant_id !== null)
        .map((r) => ({ tenant: r.tenant_id, limit: r.limit_name, minute: r.minute, hits: Number(r.hits) })),
    };
  }

  /**
   * Stores finished spans of many tenants in one statement (system work; duplicates are ignored).
   * The batch travels as one JSON parameter: one statement text (and plan) for every batch size,
   * and a flush of 256 spans takes about 0.6 of the time of a 3,328-parameter VALUES list. A plain
   * insert first: skipping duplicates (`on conflict`) makes each row a speculative insertion, a
   * second write-ahead log record and a second pass over the key; only a batch that meets a stored
   * span (one sent again after a lost commit) goes again that way.
   */
  async insertSpans(db: SystemDb, spans: StoredSpan[]): Promise<void> {
    if (spans.length === 0) return;
    const rows = JSON.stringify(
      spans.map((s) => ({
        tenant_id: s.tenantId,
        trace_id: s.traceId,
        span_id: s.spanId,
        parent_span_id: s.parentSpanId,
        name: s.name,
        kind: s.kind,
        run_id: s.runId,
        step_id: s.stepId,
        started_at: s.startedAt,
        ended_at: s.endedAt,
        status_code: s.statusCode,
        status_message: s.statusMessage,
        attributes: s.attributes,
      })),
    );
    const insert = (skipDuplicates: boolean) => sql`
      insert into span (tenant_id, trace_id, span_id, parent_span_id, name, kind, run_id, step_id,
        started_at, ended_at, status_code, status_message, attributes)
      select s.tenant_id, s.trace_id, s.span_id, s.parent_span_id, s.name, s.kind, s.run_id, s.step_id,
        s.started_at, s.ended_at, s.status_code, s.status_message, s.attributes
      from jsonb_to_recordset(${rows}::jsonb) as s(tenant_id text, trace_id text, span_id text,
        parent_span_id text, name text, kind smallint, run_id uuid, step_id text, started_at timestamptz,
        ended_at timestamptz, status_code smallint, status_message text, attributes jsonb)
      ${skipDuplicates ? sql`on conflict do nothing` : sql``}
    `;
    try {
      await insert(false).execute(db);
    } catch (e) {
      if ((e as { code?: string }).code !== '23505') throw e;
      await insert(true).execute(db);
    }
  }
}
