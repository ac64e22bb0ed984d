import { Injectable } from '@nestjs/common';
import { sql } from 'kysely';
import type { SystemDb, TenantTx } from '../../core/database/handles';
import { tenantOf } from '../../core/database/handles';
import type { TokenScope } from '../../core/http/route-spec';

export interface TokenStatus {
  revoked: boolean;
  tenantActive: boolean;
}

export interface TokenRecord {
  jti: string;
  subject: string;
  scopes: TokenScope[];
  /** The pool a worker token is bound to. */
  pool: string | null;
  /** When a worker holding it was last heard from (worker tokens). */
  lastSeenAt: Date | null;
  description: string | null;
  createdBy: string;
  createdAt: Date;
  expiresAt: Date;
  revokedAt: Date | null;
  /** created_at at full (microsecond) precision, for keyset paging. */
  createdKey: string;
}

export interface PlatformTokenRecord {
  jti: string;
  subject: string;
  description: string | null;
  createdAt: Date;
  expiresAt: Date;
  revokedAt: Date | null;
}

@Injectable()
export class AuthRepository {
  /** Revocation and tenant status for a presented tenant token; undefined when this instance never minted it. */
  async tenantTokenStatus(db: SystemDb, tenantId: string, jti: string): Promise<TokenStatus | undefined> {
    const row = await db
      .selectFrom('api_token')
      .innerJoin('tenant', 'tenant.id', 'api_token.tenant_id')
      .select(['api_token.revoked_at', 'tenant.status'])
      .where('api_token.tenant_id', '=', tenantId)
      .where('api_token.jti', '=', jti)
      .executeTakeFirst();
    return row && { revoked: row.revoked_at !== null, tenantActive: row.status === 'active' };
  }

  /** Connections to this database with the given application_name (the replicas' revocation listeners). */
  async countListeners(db: SystemDb, applicationName: string): Promise<number> {
    const r = await sql<{ n: number }>`
      select count(*)::int as n from pg_stat_activity
      where datname = current_database() and application_name = ${applicationName}`.execute(db);
    return r.rows[0].n;
  }

  async notify(db: SystemDb, channel: string, payload: string): Promise<void> {
    await sql`select pg_notify(${channel}, ${payload})`.execute(db);
  }

  async platformTokenRevoked(db: SystemDb, jti: string): Promise<boolean | undefined> {
    const row = await db.selectFrom('platform_token').select('revoked_at').where('jti', '=', jti).executeTakeFirst();
    return row && row.revoked_at !== null;
  }

  async insertPlatformToken(
    db: SystemDb,
    t: { jti: string; subject: string; description: string | null; expiresAt: Date },
  ) {
    await db
      .insertInto('platform_token')
      .values({ jti: t.jti, subject: t.subject, description: t.description, expires_at: t.expiresAt })
      .execute();
  }

  /** Platform operator tokens, newest first (a handful per instance: no paging). */
  async listPlatformTokens(db: SystemDb): Promise<PlatformTokenRecord[]> {
    const rows = await db
      .selectFrom('platform_token')
      .select(['jti', 'subject', 'description', 'created_at', 'expires_at', 'revoked_at'])
      .orderBy('created_at', 'desc')
      .orderBy('jti')
      .execute();
    return rows.map((r) => ({
      jti: r.jti,
      subject: r.subject,
      description: r.description,
      createdAt: r.created_at,
      expiresAt: r.expires_at,
      revokedAt: r.revoked_at,
    }));
  }

  /** Marks a platform token revoked (the first time is kept); undefined when there is no such token. */
  async revokePlatformToken(db: SystemDb, jti: string): Promise<Date | undefined> {
    const row = await db
      .updateTable('platform_token')
      .set({ revoked_at: sql<Date>`coalesce(revoked_at, now())` })
      .where('jti', '=', jti)
      .returning('revoked_at')
      .executeTakeFirst();
    return row?.revoked_at ?? undefined;
  }

  async insertToken(
    tx: TenantTx,
    t: {
      jti: string;
      subject: string;
      scopes: TokenScope[];
      pool?: string;
      description: string | null;
      createdBy: string;
      expiresAt: Date;
    },
  ): Promise<void> {
    await tx
      .insertInto('api_token')
      .values({
        tenant_id: tenantOf(tx),
        jti: t.jti,
        subject: t.subject,
        scopes: t.scopes,
        pool: t.pool ?? null,
        description: t.description,
        created_by: t.createdBy,
        expires_at: t.expiresAt,
      })
      .execute();
  }

  /** Newest first; `after` is the (createdKey, jti) of the previous page's last row. */
  async listTokens(
    tx: TenantTx,
    page: { limit: number; after?: { createdKey: string; jti: string } },
  ): Promise<TokenRecord[]> {
    let q = tx
      .selectFrom('api_token')
      .select([
        'jti',
        'subject',
        'scopes',
        'pool',
        'last_seen_at',
        'description',
        'created_by',
        'created_at',
        'expires_at',
        'revoked_at',
      ])
      .select(sql<string>`to_char(created_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`.as('created_key'))
      .where('tenant_id', '=', tenantOf(tx));
    if (page.after) {
      // Compared at microsecond precision: a JS Date (milliseconds) would skip rows created within the same millisecond.
      const at = sql<Date>`${page.after.createdKey}::timestamptz`;
      const jti = page.after.jti;
      q = q.where((eb) => eb.or([eb('created_at', '<', at), eb.and([eb('created_at', '=', at), eb('jti', '>', jti)])]));
    }
    const rows = await q.orderBy('created_at', 'desc').orderBy('jti', 'asc').limit(page.limit).execute();
    return rows.map((r) => ({
      jti: r.jti,
      subject: r.subject,
      scopes: r.scopes as TokenScope[],
      pool: r.pool,
      lastSeenAt: r.last_seen_at,
      description: r.description,
      createdBy: r.created_by,
      createdAt: r.created_at,
      expiresAt: r.expires_at,
      revokedAt: r.revoked_at,
      createdKey: r.created_key,
    }));
  }

  /**
   * Marks a token revoked; returns false when the tenant has no such token. Revoking twice keeps the
   * first time (`now` is false then: the revocation happened in an earlier transaction).
   */
  async revokeToken(
    tx: TenantTx,
    jti: string,
    by: string,
  ): Promise<{ found: boolean; revokedAt: Date | null; now: boolean }> {
    const row = await tx
      .updateTable('api_token')
      .set({ revoked_at: sql<Date>`coalesce(revoked_at, now())`, revoked_by: sql<string>`coalesce(revoked_by, ${by})` })
      .where('tenant_id', '=', tenantOf(tx))
      .where('jti', '=', jti)
      .returning(['revoked_at', sql<boolean>`revoked_at = now()`.as('now')])
      .executeTakeFirst();
    return { found: !!row, revokedAt: row?.revoked_at ?? null, now: row?.now === true };
  }
}
