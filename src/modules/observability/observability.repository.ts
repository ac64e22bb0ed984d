import { Injectable } from '@nestjs/common';
import type { SystemDb } from '../../core/database/handles';

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
  /** Ready steps per tenant queue: one grouped scan of the (small) hot queue, system handle. */
  async queueDepths(db: SystemDb): Promise<{ tenant: string; depth: number }[]> {
    const rows = await db
      .selectFrom('queue_item')
      .select(['tenant_id', (eb) => eb.fn.countAll<number>().as('depth')])
      .where('state', '=', 'ready')
      .groupBy('tenant_id')
      .orderBy('tenant_id')
      .execute();
    return rows.map((r) => ({ tenant: r.tenant_id, depth: Number(r.depth) }));
  }

  /** Stores finished spans of many tenants in one statement (system work; duplicates are ignored). */
  async insertSpans(db: SystemDb, spans: StoredSpan[]): Promise<void> {
    if (spans.length === 0) return;
    await db
      .insertInto('span')
      .values(
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
          attributes: JSON.stringify(s.attributes),
        })),
      )
      .onConflict((oc) => oc.doNothing())
      .execute();
  }
}
