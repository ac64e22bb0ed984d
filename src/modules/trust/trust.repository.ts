import { Injectable } from '@nestjs/common';
import { sql } from 'kysely';
import { tenantOf, type TenantTx } from '../../core/database/handles';
import type { Ed25519PublicJwk } from './detached-jws';

export interface TrustKeyRecord {
  kid: string;
  owner: string;
  publicJwk: Ed25519PublicJwk;
  createdBy: string;
  createdAt: Date;
  expiresAt: Date | null;
  revokedAt: Date | null;
}

const COLUMNS = ['kid', 'owner', 'public_jwk', 'created_by', 'created_at', 'expires_at', 'revoked_at'] as const;

type Row = {
  kid: string;
  owner: string;
  public_jwk: unknown;
  created_by: string;
  created_at: Date;
  expires_at: Date | null;
  revoked_at: Date | null;
};

const toRecord = (r: Row): TrustKeyRecord => ({
  kid: r.kid,
  owner: r.owner,
  publicJwk: r.public_jwk as Ed25519PublicJwk,
  createdBy: r.created_by,
  createdAt: r.created_at,
  expiresAt: r.expires_at,
  revokedAt: r.revoked_at,
});

/** The tenant's trusted public keys and its settings row (requireSignedDags). */
@Injectable()
export class TrustRepository {
  /** Inserts a key; returns undefined when the tenant already has that kid. */
  async insert(
    tx: TenantTx,
    k: { kid: string; owner: string; publicJwk: Ed25519PublicJwk; createdBy: string; expiresAt: Date | null },
  ): Promise<TrustKeyRecord | undefined> {
    const row = await tx
      .insertInto('trust_key')
      .values({
        tenant_id: tenantOf(tx),
        kid: k.kid,
        owner: k.owner,
        public_jwk: JSON.stringify(k.publicJwk),
        created_by: k.createdBy,
        expires_at: k.expiresAt,
      })
      .onConflict((oc) => oc.columns(['tenant_id', 'kid']).doNothing())
      .returning(COLUMNS)
      .executeTakeFirst();
    return row && toRecord(row);
  }

  async find(tx: TenantTx, kid: string): Promise<TrustKeyRecord | undefined> {
    const row = await tx
      .selectFrom('trust_key')
      .select(COLUMNS)
      .where('tenant_id', '=', tenantOf(tx))
      .where('kid', '=', kid)
      .executeTakeFirst();
    return row && toRecord(row);
  }

  /** Newest first; keyset after (createdAt, kid). */
  async list(
    tx: TenantTx,
    page: { limit: number; after?: { createdAt: Date; kid: string } },
  ): Promise<TrustKeyRecord[]> {
    let q = tx.selectFrom('trust_key').select(COLUMNS).where('tenant_id', '=', tenantOf(tx));
    if (page.after) {
      const a = page.after;
      q = q.where((eb) =>
        eb.or([
          eb('created_at', '<', a.createdAt),
          eb.and([eb('created_at', '=', a.createdAt), eb('kid', '>', a.kid)]),
        ]),
      );
    }
    const rows = await q.orderBy('created_at', 'desc').orderBy('kid', 'asc').limit(page.limit).execute();
    return rows.map(toRecord);
  }

  /** Marks a key revoked; revoking twice keeps the first time. Undefined when the tenant has no such key. */
  async revoke(tx: TenantTx, kid: string, by: string): Promise<TrustKeyRecord | undefined> {
    const row = await tx
      .updateTable('trust_key')
      .set({ revoked_at: sql<Date>`coalesce(revoked_at, now())`, revoked_by: sql<string>`coalesce(revoked_by, ${by})` })
      .where('tenant_id', '=', tenantOf(tx))
      .where('kid', '=', kid)
      .returning(COLUMNS)
      .executeTakeFirst();
    return row && toRecord(row);
  }

  async settings(tx: TenantTx): Promise<Record<string, unknown>> {
    const row = await tx.selectFrom('tenant').select('settings').where('id', '=', tenantOf(tx)).executeTakeFirst();
    return (row?.settings ?? {}) as Record<string, unknown>;
  }

  /** Merges `patch` into the tenant's settings; returns the result. */
  async mergeSettings(tx: TenantTx, patch: Record<string, unknown>): Promise<Record<string, unknown>> {
    const row = await tx
      .updateTable('tenant')
      .set({ settings: sql`settings || ${JSON.stringify(patch)}::jsonb` })
      .where('id', '=', tenantOf(tx))
      .returning('settings')
      .executeTakeFirstOrThrow();
    return row.settings as Record<string, unknown>;
  }
}
