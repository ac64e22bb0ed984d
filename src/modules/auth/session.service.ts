import { Injectable, Optional } from '@nestjs/common';
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';
import { Database } from '../../core/database/database';
import { forbidden, unauthorized } from '../../core/errors/domain-error';
import { PLATFORM_SCOPE } from '../../core/http/route-spec';
import { AuthRepository } from './auth.repository';
import { isTenantScope } from './scopes';
import { sessionCookieOf } from './session-cookie';
import { SessionRepository, type SessionRecord } from './session.repository';
import { TokenService, type VerifiedToken } from './token.service';
import { TokenStatusCache } from './token-status-cache';

export const CSRF_HEADER = 'x-csrf-token';
/** A session lives at most this long, and never longer than its token. */
export const MAX_SESSION_SECONDS = 12 * 3600;
/** 32 random bytes, base64url: the only form a session id takes. */
const SESSION_ID = /^[A-Za-z0-9_-]{43}$/;
/** Methods that change nothing; every other method needs the CSRF token with a session cookie. */
const SAFE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS']);

/** What the session routes answer (csrfToken: to send back as X-CSRF-Token on state-changing requests). */
export interface SessionView {
  tenantId: string | null;
  subject: string;
  scopes: string[];
  expiresAt: string;
  csrfToken: string;
}

export interface OpenedSession {
  id: string;
  view: SessionView;
  /** Seconds the cookie may live: the session's remaining life. */
  maxAgeSeconds: number;
}

/** A session's token as the auth guard checks a bearer token's: tenant or platform, never worker. */
export type SessionToken = Exclude<VerifiedToken, { kind: 'worker' }>;

/**
 * Console sessions: a verified tenant or platform token exchanged for a random session id, which
 * the browser holds in an HttpOnly cookie. Stored server side by the id's SHA-256 (signing out
 * deletes the row, on every replica at once); the token is never stored, only its jti, subject and
 * scopes, and each use of a session checks the token's revocation and tenant status as a bearer
 * request does (through TokenStatusCache, so a revocation ends the session on every replica).
 *
 * CSRF: the session's CSRF token is a hash of its id under another label, so it is bound to the
 * session, needs no storage, and cannot be derived from the stored hash; a page reads it from the
 * session routes (a cross-site page cannot: same-origin policy) and sends it back in X-CSRF-Token.
 */
@Injectable()
export class SessionService {
  constructor(
    private readonly tokens: TokenService,
    private readonly repo: SessionRepository,
    private readonly auth: AuthRepository,
    private readonly db: Database,
    @Optional() private readonly statuses?: TokenStatusCache,
  ) {}

  /** Verifies a token as the auth guard does and opens a session for it. */
  async open(token: string): Promise<OpenedSession> {
    const v = await this.tokens.verify(token);
    if (v.kind === 'worker') throw forbidden('a worker token cannot open a console session', 'INSUFFICIENT_SCOPE');
    await this.checkToken(v.kind === 'tenant' ? v.tid : null, v.jti);
    const now = Date.now();
    const maxAgeSeconds = Math.floor((Math.min(v.exp * 1000, now + MAX_SESSION_SECONDS * 1000) - now) / 1000);
    if (maxAgeSeconds < 1) throw unauthorized('token expired', 'TOKEN_EXPIRED');
    const record: SessionRecord = {
      tenantId: v.kind === 'tenant' ? v.tid : null,
      tokenJti: v.jti,
      subject: v.sub,
      scopes: v.kind === 'tenant' ? v.scopes : [PLATFORM_SCOPE],
      expiresAt: new Date(now + maxAgeSeconds * 1000),
    };
    const id = randomBytes(32).toString('base64url');
    await this.repo.purgeExpired(this.db.system);
    await this.repo.insert(this.db.system, idHash(id), record);
    return { id, view: view(id, record), maxAgeSeconds };
  }

  /** The session a request's cookie names, with its token still valid; 401 otherwise. */
  async current(headers: IncomingHttpHeaders): Promise<SessionView> {
    const id = sessionCookieOf(headers);
    const s = await this.find(id);
    await this.checkToken(s.tenantId, s.tokenJti);
    return view(id!, s);
  }

  /**
   * Ends the session a request's cookie names (its CSRF token is required, as on any
   * state-changing request); nothing to end is not an error.
   */
  async end(headers: IncomingHttpHeaders): Promise<void> {
    const id = sessionCookieOf(headers);
    if (id === undefined || !SESSION_ID.test(id)) return;
    const hash = idHash(id);
    if (!(await this.repo.find(this.db.system, hash))) return;
    checkCsrf('DELETE', headers, id);
    await this.repo.delete(this.db.system, hash);
  }

  /**
   * The token behind the session `id` (read from the cookie with sessionCookieOf), for the auth guard
   * to check as it checks a bearer token; 401 when the session does not exist, was ended or has
   * expired. Its `exp` is the session's expiry.
   */
  async token(id: string): Promise<SessionToken> {
    const s = await this.find(id);
    const exp = Math.floor(s.expiresAt.getTime() / 1000);
    if (s.tenantId === null) return { kind: 'platform', sub: s.subject, jti: s.tokenJti, exp };
    return {
      kind: 'tenant',
      sub: s.subject,
      tid: s.tenantId,
      scopes: s.scopes.filter(isTenantScope),
      jti: s.tokenJti,
      exp,
    };
  }

  private async find(id: string | undefined): Promise<SessionRecord> {
    if (id === undefined) throw unauthorized('no console session', 'UNAUTHENTICATED');
    if (!SESSION_ID.test(id)) throw unauthorized('console session cookie malformed', 'SESSION_INVALID');
    const s = await this.repo.find(this.db.system, idHash(id));
    if (!s) throw unauthorized('console session ended or expired', 'SESSION_INVALID');
    return s;
  }

  /** The token's revocation and tenant status, as the auth guard checks them. */
  private async checkToken(tenantId: string | null, jti: string): Promise<void> {
    if (tenantId === null) {
      const revoked = await this.auth.platformTokenRevoked(this.db.system, jti);
      if (revoked === undefined) throw unauthorized('token unknown to this instance', 'INVALID_TOKEN');
      if (revoked) throw unauthorized('token revoked', 'TOKEN_REVOKED');
      return;
    }
    const status = this.statuses
      ? await this.statuses.status(tenantId, jti)
      : await this.auth.tenantTokenStatus(this.db.system, tenantId, jti);
    if (!status) throw unauthorized('token unknown to this instance', 'INVALID_TOKEN');
    if (status.revoked) throw unauthorized('token revoked', 'TOKEN_REVOKED');
    if (!status.tenantActive) throw forbidden('tenant is disabled', 'TENANT_DISABLED');
  }
}

/**
 * Refuses (403 CSRF_FAILED) a state-changing request made with the session cookie unless its
 * X-CSRF-Token header is the session's CSRF token.
 */
export function checkCsrf(method: string, headers: IncomingHttpHeaders, id: string): void {
  if (SAFE_METHODS.has(method.toUpperCase())) return;
  const sent = headers[CSRF_HEADER];
  const want = Buffer.from(csrfToken(id));
  if (typeof sent !== 'string' || Buffer.byteLength(sent) !== want.length || !timingSafeEqual(Buffer.from(sent), want))
    throw forbidden('a state-changing request with a session cookie needs its X-CSRF-Token header', 'CSRF_FAILED');
}

/**
 * Whether an Origin header names the host the request was sent to. Browsers send Origin on
 * WebSocket upgrades and cross-origin requests; a page of another origin cannot forge it.
 */
export function sameOrigin(headers: IncomingHttpHeaders): boolean {
  const origin = headers.origin;
  const host = headers.host;
  if (typeof origin !== 'string' || typeof host !== 'string') return false;
  try {
    return new URL(origin).host === host.toLowerCase();
  } catch {
    return false;
  }
}

/** The stored form of a session id. */
function idHash(id: string): Buffer {
  return createHash('sha256').update(id).digest();
}

function csrfToken(id: string): string {
  return createHash('sha256').update('ordo-csrf\0').update(id).digest('base64url');
}

function view(id: string, s: SessionRecord): SessionView {
  return {
    tenantId: s.tenantId,
    subject: s.subject,
    scopes: s.scopes,
    expiresAt: s.expiresAt.toISOString(),
    csrfToken: csrfToken(id),
  };
}
