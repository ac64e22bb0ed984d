import { Injectable } from '@nestjs/common';
import type { IncomingMessage } from 'node:http';
import { Database } from '../../core/database/database';
import { DomainError } from '../../core/errors/domain-error';
import { rootLogger } from '../../core/logging/logger';
import { AuthRepository } from '../auth/auth.repository';
import { grants } from '../auth/scopes';
import { sessionCookieOf } from '../auth/session-cookie';
import { SessionService, sameOrigin } from '../auth/session.service';
import { TokenService, type VerifiedToken } from '../auth/token.service';
import { parseCursor, type Cursor } from './stream-cursor';

const TENANT = /^[a-z0-9][a-z0-9-]{0,62}$/;
const BEARER = /^Bearer ([A-Za-z0-9_-]+\.[A-Za-z0-9_-]*\.[A-Za-z0-9_-]*)$/;

/** Who a stream connection acts as: its tenant, and the token that must stay valid while it is open. */
export interface StreamIdentity {
  tenantId: string;
  jti: string;
  /** Token expiry (epoch seconds). */
  exp: number;
}

/**
 * What an accepted upgrade request carries: where to resume, and the identity when the request
 * authenticated with its headers (without them, the first message must be `auth`).
 */
export interface StreamUpgrade {
  since?: Cursor;
  who?: StreamIdentity;
}

/** A refused upgrade or auth message: the HTTP status and error code the client sees. */
export class StreamAuthError extends Error {
  constructor(
    readonly status: 401 | 403 | 400,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

/**
 * The stream's authentication, as the REST guard does it: the API's tokens (signature, expiry,
 * revocation), the tenant header matching the token's tenant, an active tenant and scope
 * `orchestrator:read`. Tokens are never taken from the URL. An upgrade without an Authorization
 * header may carry the console's session cookie instead, accepted only when its Origin header is
 * this host's (a page of another origin cannot open a socket with the browser's cookie); the
 * session's token then goes through the same checks.
 */
@Injectable()
export class StreamAuthenticator {
  constructor(
    private readonly tokens: TokenService,
    private readonly auth: AuthRepository,
    private readonly db: Database,
    private readonly sessions: SessionService,
  ) {}

  /** Checks an upgrade request before it is accepted; throws the refusal. */
  async checkUpgrade(req: IncomingMessage): Promise<StreamUpgrade> {
    const url = new URL(req.url ?? '/', 'http://localhost');
    if (url.searchParams.has('token') || url.searchParams.has('access_token'))
      throw new StreamAuthError(
        400,
        'TOKEN_IN_URL',
        'tokens are not accepted in the URL; use the Authorization header or an auth message',
      );
    const sinceParam = url.searchParams.get('since');
    const since = sinceParam === null ? undefined : parseCursor(sinceParam);
    if (sinceParam !== null && !since) throw new StreamAuthError(400, 'INVALID_CURSOR', 'since is not a stream cursor');
    const header = req.headers.authorization;
    const tenantHeader = req.headers['x-tenant-id'];
    const tenantId = typeof tenantHeader === 'string' ? tenantHeader : undefined;
    if (header === undefined) {
      const sessionId = sessionCookieOf(req.headers);
      if (sessionId === undefined) return { since };
      if (!sameOrigin(req.headers))
        throw new StreamAuthError(403, 'CSRF_FAILED', 'a session cookie is accepted only from this origin');
      const v = await this.sessions.token(sessionId);
      return { since, who: await this.identify(v, tenantId ?? (v.kind === 'tenant' ? v.tid : undefined)) };
    }
    return { since, who: await this.authenticate(header, tenantId) };
  }

  private async authenticate(authorization: string, tenantId: string | undefined): Promise<StreamIdentity> {
    const m = BEARER.exec(authorization.trim());
    if (!m) throw new StreamAuthError(401, 'INVALID_TOKEN', 'Authorization header is not a bearer JWT');
    return this.verify(m[1], tenantId);
  }

  /** Verifies a token for a tenant (from the upgrade's headers or an auth message). */
  async verify(token: string, tenantId: string | undefined): Promise<StreamIdentity> {
    return this.identify(await this.tokens.verify(token), tenantId);
  }

  private async identify(v: VerifiedToken, tenantId: string | undefined): Promise<StreamIdentity> {
    if (v.kind !== 'tenant') throw new StreamAuthError(403, 'INSUFFICIENT_SCOPE', 'the stream needs a tenant token');
    const status = await this.auth.tenantTokenStatus(this.db.system, v.tid, v.jti);
    if (!status) throw new StreamAuthError(401, 'INVALID_TOKEN', 'token unknown to this instance');
    if (status.revoked) throw new StreamAuthError(401, 'TOKEN_REVOKED', 'token revoked');
    if (!tenantId) throw new StreamAuthError(400, 'MISSING_TENANT', 'X-Tenant-Id header is required');
    if (!TENANT.test(tenantId)) throw new StreamAuthError(400, 'INVALID_TENANT', 'X-Tenant-Id is not a tenant id');
    if (tenantId !== v.tid) throw new StreamAuthError(403, 'TENANT_MISMATCH', 'token does not belong to this tenant');
    if (!status.tenantActive) throw new StreamAuthError(403, 'TENANT_DISABLED', 'tenant is disabled');
    if (!grants(v.scopes, 'orchestrator:read'))
      throw new StreamAuthError(403, 'INSUFFICIENT_SCOPE', 'the stream needs scope orchestrator:read');
    return { tenantId: v.tid, jti: v.jti, exp: v.exp };
  }
}

/** The refusal for any failure of authentication: the token service's 401/403, otherwise a bare 401. */
export function toAuthError(e: unknown): StreamAuthError {
  if (e instanceof StreamAuthError) return e;
  if (e instanceof DomainError && (e.status === 401 || e.status === 403))
    return new StreamAuthError(e.status, e.code, e.message);
  rootLogger().warn({ err: e }, 'stream authentication failed unexpectedly');
  return new StreamAuthError(401, 'UNAUTHENTICATED', 'authentication failed');
}
