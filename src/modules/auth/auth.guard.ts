import { Injectable, Optional, type CanActivate, type ExecutionContext } from '@nestjs/common';
import { Reflector } from '@nestjs/core';
import type { FastifyRequest } from 'fastify';
import { Database } from '../../core/database/database';
import { badRequest, forbidden, unauthorized } from '../../core/errors/domain-error';
import { requestState } from '../../core/http/request-context';
import { ROUTE_SPEC, type RouteSpec } from '../../core/http/route-spec';
import { AuthRepository } from './auth.repository';
import { grants } from './scopes';
import { sessionCookieOf } from './session-cookie';
import { SessionService, checkCsrf } from './session.service';
import { TokenService, type VerifiedToken } from './token.service';
import { TokenStatusCache } from './token-status-cache';

const TENANT_HEADER = /^[a-z0-9][a-z0-9-]{0,62}$/;

/**
 * Authenticates every route that is not public: 401 for a missing, malformed, expired, unknown or
 * revoked token; 403 for a tenant header that is not the token's tenant, a missing scope or a
 * disabled tenant. A tenant token's revocation and its tenant's status come from TokenStatusCache
 * (kept current by database notifications, so a revocation holds on every replica at once);
 * platform tokens are checked in the database on each request.
 *
 * A request without an Authorization header may authenticate with a console session cookie
 * instead (the bearer wins when both are present): the session stands for the token it was opened
 * with and goes through the same checks, its tenant is the X-Tenant-Id when that header is absent,
 * and a state-changing request needs the session's X-CSRF-Token (403 CSRF_FAILED).
 */
@Injectable()
export class AuthGuard implements CanActivate {
  constructor(
    private readonly reflector: Reflector,
    private readonly tokens: TokenService,
    private readonly repo: AuthRepository,
    private readonly db: Database,
    // Absent where a module provides this guard for its own routes only (then: one query per check).
    @Optional() private readonly statuses?: TokenStatusCache,
    // Absent likewise: there, only bearer tokens are accepted.
    @Optional() private readonly sessions?: SessionService,
  ) {}

  async canActivate(ctx: ExecutionContext): Promise<boolean> {
    if (ctx.getType() !== 'http') return true;
    const spec = this.reflector.get<RouteSpec | undefined>(ROUTE_SPEC, ctx.getHandler());
    const req = ctx.switchToHttp().getRequest<FastifyRequest>();
    const state = requestState(req);
    if (!spec || spec.access === 'public') {
      state.principal = { kind: 'anonymous' };
      return true;
    }
    const sessionId =
      req.headers.authorization === undefined && this.sessions ? sessionCookieOf(req.headers) : undefined;
    const verified: VerifiedToken =
      sessionId !== undefined
        ? await this.sessions!.token(sessionId)
        : await this.tokens.verify(bearer(req.headers.authorization));

    if (spec.access === 'platform:admin') {
      if (verified.kind !== 'platform') throw forbidden('this route needs scope platform:admin', 'INSUFFICIENT_SCOPE');
      const revoked = await this.repo.platformTokenRevoked(this.db.system, verified.jti);
      if (revoked === undefined) throw unauthorized('token unknown to this instance', 'INVALID_TOKEN');
      if (revoked) throw unauthorized('token revoked', 'TOKEN_REVOKED');
      if (sessionId !== undefined) checkCsrf(req.method, req.headers, sessionId);
      state.principal = { kind: 'platform', subject: verified.sub, jti: verified.jti };
      return true;
    }

    // A worker route takes a worker token, a tenant route a tenant token; either is first checked as
    // a tenant's token (unknown or revoked: 401).
    if (verified.kind === 'platform' || (verified.kind === 'worker' && spec.access !== 'worker'))
      throw forbidden(`this route needs scope ${spec.access}`, 'INSUFFICIENT_SCOPE');
    const status = this.statuses
      ? await this.statuses.status(verified.tid, verified.jti)
      : await this.repo.tenantTokenStatus(this.db.system, verified.tid, verified.jti);
    if (!status) throw unauthorized('token unknown to this instance', 'INVALID_TOKEN');
    if (status.revoked) throw unauthorized('token revoked', 'TOKEN_REVOKED');
    if (sessionId !== undefined) checkCsrf(req.method, req.headers, sessionId);
    // A session is bound to its token's tenant: the header may be left out, and must match if sent.
    const header = req.headers['x-tenant-id'] ?? (sessionId !== undefined ? verified.tid : undefined);
    if (typeof header !== 'string' || header === '')
      throw badRequest('MISSING_TENANT', 'X-Tenant-Id header is required');
    if (!TENANT_HEADER.test(header)) throw badRequest('INVALID_TENANT', 'X-Tenant-Id is not a tenant id');
    if (header !== verified.tid) throw forbidden('token does not belong to this tenant', 'TENANT_MISMATCH');
    if (!status.tenantActive) throw forbidden('tenant is disabled', 'TENANT_DISABLED');
    if (spec.access === 'worker' && verified.kind !== 'worker')
      throw forbidden('this route needs a worker token', 'INSUFFICIENT_SCOPE');
    if (verified.kind === 'worker') {
      state.principal = {
        kind: 'worker',
        tenantId: verified.tid,
        subject: verified.sub,
        pool: verified.pool,
        jti: verified.jti,
        exp: verified.exp,
      };
      return true;
    }
    if (spec.access === 'worker' || !grants(verified.scopes, spec.access))
      throw forbidden(`this route needs scope ${spec.access}`, 'INSUFFICIENT_SCOPE');
    state.principal = {
      kind: 'tenant',
      tenantId: verified.tid,
      subject: verified.sub,
      scopes: verified.scopes,
      jti: verified.jti,
    };
    return true;
  }
}

function bearer(h: string | undefined): string {
  if (!h) throw unauthorized('Authorization: Bearer <token> is required', 'UNAUTHENTICATED');
  const m = /^Bearer +([A-Za-z0-9_-]+\.[A-Za-z0-9_-]*\.[A-Za-z0-9_-]*)$/i.exec(h.trim());
  if (!m) throw unauthorized('Authorization header is not a bearer JWT', 'INVALID_TOKEN');
  return m[1];
}
