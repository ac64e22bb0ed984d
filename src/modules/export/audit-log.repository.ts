import { Injectable } from '@nestjs/common';
import type { SystemDb } from '../../core/database/handles';
import type { OperatorAuditEntry } from '../plans/operator-audit.repository';

/** Reads of the operator audit log (appended by OperatorAuditRepository): system handle. */
@Injectable()
export class AuditLogRepository {
  /**
   * Entries in seq order (`asc` from `afterSeq`, `desc` before `beforeSeq`), up to `toSeq`,
   * optionally of one tenant (its index (tenant_id, seq)).
   */
  async page(
    db: SystemDb,
    q: {
      tenantId?: string;
      afterSeq?: number;
      beforeSeq?: number;
      toSeq?: number;
      limit: number;
      order: 'asc' | 'desc';
    },
  ): Promise<OperatorAuditEntry[]> {
    let query = db.selectFrom('operator_audit').selectAll();
    if (q.tenantId !== undefined) query = query.where('tenant_id', '=', q.tenantId);
    if (q.afterSeq !== undefined) query = query.where('seq', '>', q.afterSeq);
    if (q.beforeSeq !== undefined) query = query.where('seq', '<', q.beforeSeq);
    if (q.toSeq !== undefined) query = query.where('seq', '<=', q.toSeq);
    const rows = await query.orderBy('seq', q.order).limit(q.limit).execute();
    return rows.map((r) => ({
      seq: r.seq,
      at: r.at.toISOString(),
      actor: r.actor,
      tokenJti: r.token_jti,
      action: r.action,
      tenantId: r.tenant_id,
      planId: r.plan_id,
      reason: r.reason,
      detail: r.detail as Record<string, unknown>,
      prevHash: r.prev_hash,
      hash: r.hash,
    }));
  }

  /** The last entry's seq (0 when the log is empty). */
  async headSeq(db: SystemDb): Promise<number> {
    const row = await db.selectFrom('operator_audit').select('seq').orderBy('seq', 'desc').limit(1).executeTakeFirst();
    return row?.seq ?? 0;
  }
}
