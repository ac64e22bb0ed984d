import { Injectable } from '@nestjs/common';
import { sql } from 'kysely';
import { tenantOf, type SystemDb, type TenantTx } from '../../core/database/handles';

export interface IdempotencyRecord {
  request_hash: string;
  state: string;
  response_status: number | null;
  response_body: unknown;
  stale: boolean;
}

@Injectable()
export class IdempotencyRepository {
  /**
   * Claims the key for this request; returns true when this request now owns it. A record past its
   * expiry is taken over as if absent (whether or not retention has deleted it yet).
   */
  async claim(
    tx: TenantTx,
    r: { key: string; method: string; path: string; hash: string; ttlSeconds: number },
  ): Promise<boolean> {
    const inserted = await tx
      .insertInto('idempotency_key')
      .values({
        tenant_id: tenantOf(tx),
        key: r.key,
        method: r.method,
        path: r.path,
        request_hash: r.hash,
        state: 'processing',
        expires_at: sql<Date>`now() + make_interval(secs => ${r.ttlSeconds})`,
      })
      .onConflict((oc) =>
        oc
          .columns(['tenant_id', 'key'])
          .doUpdateSet({
            method: r.method,
            path: r.path,
            request_hash: r.hash,
            state: 'processing',
            response_status: null,
            response_body: null,
            created_at: sql<Date>`now()`,
            expires_at: sql<Date>`now() + make_interval(secs => ${r.ttlSeconds})`,
          })
          .where('idempotency_key.expires_at', '<=', sql<Date>`now()`),
      )
      .returning('key')
      .executeTakeFirst();
    return !!inserted;
  }

  async find(tx: TenantTx, key: string, staleAfterSeconds: number): Promise<IdempotencyRecord | undefined> {
    return tx
      .selectFrom('idempotency_key')
      .select([
        'request_hash',
        'state',
        'response_status',
        'response_body',
        sql<boolean>`state = 'processing' and created_at < now() - make_interval(secs => ${staleAfterSeconds})`.as(
          'stale',
        ),
      ])
      .where('tenant_id', '=', tenantOf(tx))
      .where('key', '=', key)
      .executeTakeFirst();
  }

  /** Takes over a record abandoned mid-request (its process died). */
  async takeOver(tx: TenantTx, key: string, hash: string, staleAfterSeconds: number): Promise<boolean> {
    const r = await tx
      .updateTable('idempotency_key')
      .set({ created_at: sql<Date>`now()` })
      .where('tenant_id', '=', tenantOf(tx))
      .where('key', '=', key)
      .where('request_hash', '=', hash)
      .where('state', '=', 'processing')
      .where('created_at', '<', sql<Date>`now() - make_interval(secs => ${staleAfterSeconds})`)
      .returning('key')
      .executeTakeFirst();
    return !!r;
  }

  async complete(tx: TenantTx, key: string, status: number, body: unknown): Promise<void> {
    await tx
      .updateTable('idempotency_key')
      .set({ state: 'done', response_status: status, response_body: JSON.stringify(body ?? null) })
      .where('tenant_id', '=', tenantOf(tx))
      .where('key', '=', key)
      .execute();
  }

  async release(tx: TenantTx, key: string): Promise<void> {
    await tx
      .deleteFrom('idempotency_key')
      .where('tenant_id', '=', tenantOf(tx))
      .where('key', '=', key)
      .where('state', '=', 'processing')
      .execute();
  }

  /** Retention: drops expired records across tenants. */
  async purgeExpired(db: SystemDb, limit: number): Promise<number> {
    const r = await sql<{ n: number }>`
      with gone as (
        delete from idempotency_key where ctid in (select ctid from idempotency_key where expires_at < now() limit ${limit})
        returning 1)
      select count(*)::int as n from gone`.execute(db);
    return r.rows[0]?.n ?? 0;
  }
}
