import { Injectable } from '@nestjs/common';
import { sql, type Transaction } from 'kysely';
import type { DB } from '../../core/database/db.generated';
import { tenantOf, type SystemDb, type TenantTx } from '../../core/database/handles';
import type { Cursor } from './stream-cursor';

export interface StreamEventRow {
  stream_xid: string;
  stream_id: string;
  run_id: string;
  seq: number;
  type: string;
  step_id: string | null;
  attempt: number | null;
  created_at: Date;
  data: unknown;
  dag_id: string;
  trace_id: string;
}

const trx = (tx: TenantTx) => tx as unknown as Transaction<DB>;

@Injectable()
export class StreamRepository {
  /**
   * The tenant's events after `after` in stream order that can be delivered now: those whose
   * transactions ended before every transaction still running began (stream_xid below the
   * snapshot's xmin), since later commits always sort after them. `heldBack` says that committed
   * events follow which must wait for an older transaction to end.
   */
  async eventsAfter(
    tx: TenantTx,
    after: Cursor,
    limit: number,
  ): Promise<{ rows: StreamEventRow[]; heldBack: boolean }> {
    const r = await sql<StreamEventRow & { stable: boolean }>`
      select e.stream_xid::text as stream_xid, e.stream_id::text as stream_id, e.run_id, e.seq, e.type, e.step_id,
        e.attempt, e.created_at, e.data, r.dag_id, r.trace_id,
        e.stream_xid < pg_snapshot_xmin(pg_current_snapshot()) as stable
      from run_event e
      join run r on r.tenant_id = e.tenant_id and r.run_id = e.run_id
      where e.tenant_id = ${tenantOf(tx)}
        and (e.stream_xid, e.stream_id) > (${after.xid.toString()}::xid8, ${after.id.toString()}::bigint)
      order by e.stream_xid, e.stream_id
      limit ${limit}`.execute(trx(tx));
    // Stable rows sort before unstable ones (xid order), so the deliverable part is a prefix.
    const cut = r.rows.findIndex((row) => !row.stable);
    const rows = cut === -1 ? r.rows : r.rows.slice(0, cut);
    return { rows: rows.map(({ stable: _stable, ...row }) => row), heldBack: cut !== -1 };
  }

  /** The cursor of the tenant's last deliverable event (a new connection starts there). */
  async head(tx: TenantTx): Promise<{ stream_xid: string; stream_id: string } | undefined> {
    const r = await sql<{ stream_xid: string; stream_id: string }>`
      select e.stream_xid::text as stream_xid, e.stream_id::text as stream_id
      from run_event e
      where e.tenant_id = ${tenantOf(tx)} and e.stream_xid < pg_snapshot_xmin(pg_current_snapshot())
      order by e.stream_xid desc, e.stream_id desc
      limit 1`.execute(trx(tx));
    return r.rows[0];
  }

  /** Of the given tenant tokens, those no longer valid: revoked, unknown, or of a disabled tenant. */
  async invalidTokens(
    db: SystemDb,
    tokens: { tenantId: string; jti: string }[],
  ): Promise<{ tenantId: string; jti: string }[]> {
    if (tokens.length === 0) return [];
    const r = await sql<{ tenant_id: string; jti: string }>`
      select k.tenant_id, k.jti::text as jti
      from unnest(${tokens.map((t) => t.tenantId)}::text[], ${tokens.map((t) => t.jti)}::uuid[]) as k(tenant_id, jti)
      left join api_token a on a.tenant_id = k.tenant_id and a.jti = k.jti
      left join tenant t on t.id = k.tenant_id
      where a.jti is null or a.revoked_at is not null or t.status is distinct from 'active'`.execute(db);
    return r.rows.map((row) => ({ tenantId: row.tenant_id, jti: row.jti }));
  }
}
