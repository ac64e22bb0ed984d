import { Injectable } from '@nestjs/common';
import { sql } from 'kysely';
import type { SystemDb } from '../../core/database/handles';

/** A console session as stored: what its token was, never the token nor the session id. */
export interface SessionRecord {
  tenantId: string | null;
  tokenJti: string;
  subject: string;
  scopes: string[];
  expiresAt: Date;
}

/** Expired rows removed per sign-in: bounded, so a sign-in never waits on a large delete. */
const PURGE_BATCH = 100;

/**
 * Console sessions by the SHA-256 of their id. A session is looked up before its tenant is known
 * (the cookie is the credential), so these queries run as the system role, as a token's status
 * check does; row-level security keeps the table from the application role.
 */
@Injectable()
export class SessionRepository {
  async insert(db: SystemDb, idHash: Buffer, s: SessionRecord): Promise<void> {
    await db
      .insertInto('console_session')
      .values({
        id_hash: idHash,
        tenant_id: s.tenantId,
        token_jti: s.tokenJti,
        subject: s.subject,
        scopes: s.scopes,
        expires_at: s.expiresAt,
      })
      .execute();
  }

  /** The session, unless it was ended or has expired. */
  async find(db: SystemDb, idHash: Buffer): Promise<SessionRecord | undefined> {
    const row = await db
      .selectFrom('console_session')
      .select(['tenant_id', 'token_jti', 'subject', 'scopes', 'expires_at'])
      .where('id_hash', '=', idHash)
      .where('expires_at', '>', sql<Date>`now()`)
      .executeTakeFirst();
    return (
      row && {
        tenantId: row.tenant_id,
        tokenJti: row.token_jti,
        subject: row.subject,
        scopes: row.scopes,
        expiresAt: row.expires_at,
      }
    );
  }

  async delete(db: SystemDb, idHash: Buffer): Promise<void> {
    await db.deleteFrom('console_session').where('id_hash', '=', idHash).execute();
  }

  /** Removes up to PURGE_BATCH expired sessions (they are refused anyway; this only reclaims space). */
  async purgeExpired(db: SystemDb): Promise<void> {
    await db
      .deleteFrom('console_session')
      .where(
        'id_hash',
        'in',
        db
          .selectFrom('console_session')
          .select('id_hash')
          .where('expires_at', '<=', sql<Date>`now()`)
          .limit(PURGE_BATCH),
      )
      .execute();
  }
}
