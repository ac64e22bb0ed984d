import { Injectable } from '@nestjs/common';
import { sql } from 'kysely';
import type { SystemTx } from '../../core/database/handles';
import { canonicalHash } from '../../core/json/canonical-json';

/** What an operator did: an entry of the operator audit log, before it is numbered and chained. */
export interface OperatorAuditInput {
  actor: string;
  tokenJti: string;
  /** e.g. plan.create, plan.update, tenant.plan.assign, tenant.overrides.set, tenant.usage.reset */
  action: string;
  tenantId?: string | null;
  planId?: string | null;
  reason?: string | null;
  detail?: Record<string, unknown>;
}

export interface OperatorAuditEntry {
  seq: number;
  at: string;
  actor: string;
  tokenJti: string;
  action: string;
  tenantId: string | null;
  planId: string | null;
  reason: string | null;
  detail: Record<string, unknown>;
  prevHash: string;
  hash: string;
}

export const AUDIT_GENESIS_HASH = '0'.repeat(64);

/**
 * An entry's hash: SHA-256 of the RFC 8785 form of the entry without its hash (its prevHash
 * included), so each entry covers every one before it. The one home of the audit chain's rule.
 */
export function operatorAuditHash(e: Omit<OperatorAuditEntry, 'hash'>): string {
  return canonicalHash({
    seq: e.seq,
    at: e.at,
    actor: e.actor,
    tokenJti: e.tokenJti,
    action: e.action,
    tenantId: e.tenantId,
    planId: e.planId,
    reason: e.reason,
    detail: e.detail,
    prevHash: e.prevHash,
  });
}

/** The operator audit log: appended in the transaction of the change it records. */
@Injectable()
export class OperatorAuditRepository {
  /** Appends one entry, numbered and chained after the last (appends are serialized by a lock). */
  async append(tx: SystemTx, input: OperatorAuditInput): Promise<OperatorAuditEntry> {
    await sql`select pg_advisory_xact_lock(hashtextextended('ordo.operator_audit', 0))`.execute(tx);
    const last = await tx
      .selectFrom('operator_audit')
      .select(['seq', 'hash'])
      .orderBy('seq', 'desc')
      .limit(1)
      .executeTakeFirst();
    const { rows } = await sql<{ at: Date }>`select date_trunc('milliseconds', now()) as at`.execute(tx);
    const base = {
      seq: last ? Number(last.seq) + 1 : 1,
      at: rows[0].at.toISOString(),
      actor: input.actor,
      tokenJti: input.tokenJti,
      action: input.action,
      tenantId: input.tenantId ?? null,
      planId: input.planId ?? null,
      reason: input.reason ?? null,
      detail: input.detail ?? {},
      prevHash: last?.hash ?? AUDIT_GENESIS_HASH,
    };
    const entry: OperatorAuditEntry = { ...base, hash: operatorAuditHash(base) };
    await tx
      .insertInto('operator_audit')
      .values({
        seq: entry.seq,
        at: entry.at,
        actor: entry.actor,
        token_jti: entry.tokenJti,
        action: entry.action,
        tenant_id: entry.tenantId,
        plan_id: entry.planId,
        reason: entry.reason,
        detail: JSON.stringify(entry.detail),
        prev_hash: entry.prevHash,
        hash: entry.hash,
      })
      .execute();
    return entry;
  }
}
