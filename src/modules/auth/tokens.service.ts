import { Injectable } from '@nestjs/common';
import { Database } from '../../core/database/database';
import { decodePageToken, encodePageToken } from '../../core/http/page-token';
import type { TenantPrincipalT } from '../../core/http/request-context';
import { WORKER_SCOPE, type TenantScope } from '../../core/http/route-spec';
import { badRequest, forbidden, notFound } from '../../core/errors/domain-error';
import { AuthRepository } from './auth.repository';
import { covers } from './scopes';
import { TokenService } from './token.service';
import { TokenStatusCache } from './token-status-cache';
import type { CreateTokenBody, MintedTokenDto, TokenRecordDto } from './tokens.dto';

type PageKey = { c: string; j: string };
const isPageKey = (v: unknown): v is PageKey =>
  typeof v === 'object' &&
  v !== null &&
  typeof (v as PageKey).c === 'string' &&
  typeof (v as PageKey).j === 'string' &&
  /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$/.test((v as PageKey).c) &&
  !Number.isNaN(Date.parse((v as PageKey).c)) &&
  /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/.test((v as PageKey).j);

/** Tenant tokens: minted by a tenant admin (never with more than it holds), listed and revoked. */
@Injectable()
export class TokensService {
  constructor(
    private readonly db: Database,
    private readonly repo: AuthRepository,
    private readonly tokens: TokenService,
    private readonly statuses: TokenStatusCache,
  ) {}

  async create(principal: TenantPrincipalT, body: CreateTokenBody): Promise<MintedTokenDto> {
    if (body.scopes.includes(WORKER_SCOPE)) return this.createWorker(principal, body);
    if (body.pool !== undefined)
      throw badRequest('POOL_WITHOUT_WORKER_SCOPE', 'only a worker token is bound to a pool');
    const scopes = [...new Set(body.scopes as TenantScope[])].sort();
    if (!covers(principal.scopes, scopes))
      throw forbidden('cannot mint a token with more scopes than the caller holds', 'SCOPE_ESCALATION');
    return this.mintFor(
      principal.tenantId,
      body.subject ?? principal.subject,
      scopes,
      principal.subject,
      body.ttlSeconds,
      body.description,
    );
  }

  /**
   * A worker token (scope `worker` alone, bound to a pool), minted by a tenant admin: it reaches the
   * worker routes of its tenant and pool and nothing else.
   */
  private async createWorker(principal: TenantPrincipalT, body: CreateTokenBody): Promise<MintedTokenDto> {
    if (body.scopes.some((s) => s !== WORKER_SCOPE))
      throw badRequest('WORKER_SCOPE_ALONE', 'a worker token has the one scope worker');
    if (body.pool === undefined) throw badRequest('POOL_REQUIRED', 'a worker token is bound to a pool: give pool');
    if (!covers(principal.scopes, ['orchestrator:admin']))
      throw forbidden('minting a worker token needs scope orchestrator:admin', 'SCOPE_ESCALATION');
    const subject = body.subject ?? principal.subject;
    const minted = await this.tokens.mintWorker(principal.tenantId, subject, body.pool, body.ttlSeconds);
    await this.db.withTenant(principal.tenantId, (tx) =>
      this.repo.insertToken(tx, {
        jti: minted.jti,
        subject,
        scopes: [WORKER_SCOPE],
        pool: body.pool,
        description: body.description ?? null,
        createdBy: principal.subject,
        expiresAt: minted.expiresAt,
      }),
    );
    return {
      token: minted.token,
      jti: minted.jti,
      tenantId: principal.tenantId,
      subject,
      scopes: [WORKER_SCOPE],
      pool: body.pool,
      expiresAt: minted.expiresAt.toISOString(),
    };
  }

  /** Mints and records a tenant token; also used by platform operators and the first-start bootstrap. */
  async mintFor(
    tenantId: string,
    subject: string,
    scopes: TenantScope[],
    createdBy: string,
    ttlSeconds?: number,
    description?: string,
  ): Promise<MintedTokenDto> {
    const minted = await this.tokens.mintTenant(tenantId, subject, scopes, ttlSeconds);
    await this.db.withTenant(tenantId, (tx) =>
      this.repo.insertToken(tx, {
        jti: minted.jti,
        subject,
        scopes,
        description: description ?? null,
        createdBy,
        expiresAt: minted.expiresAt,
      }),
    );
    return {
      token: minted.token,
      jti: minted.jti,
      tenantId,
      subject,
      scopes,
      pool: null,
      expiresAt: minted.expiresAt.toISOString(),
    };
  }

  async list(principal: TenantPrincipalT, q: { limit: number; pageToken?: string }) {
    const after = decodePageToken(q.pageToken, isPageKey);
    const rows = await this.db.withTenant(principal.tenantId, (tx) =>
      this.repo.listTokens(tx, { limit: q.limit + 1, after: after && { createdKey: after.c, jti: after.j } }),
    );
    const items = rows.slice(0, q.limit).map(toDto);
    const last = rows.length > q.limit ? rows[q.limit - 1] : undefined;
    return { items, nextPageToken: last ? encodePageToken({ c: last.createdKey, j: last.jti }) : null };
  }

  /** After a tenant's status changed: returns once every api replica refuses or accepts its tokens accordingly. */
  async tenantStatusChanged(tenantId: string): Promise<void> {
    await this.statuses.tenantChanged(tenantId);
  }

  async revoke(principal: TenantPrincipalT, jti: string): Promise<{ jti: string; revokedAt: string }> {
    const r = await this.db.withTenant(principal.tenantId, (tx) => this.repo.revokeToken(tx, jti, principal.subject));
    if (!r.found || !r.revokedAt) throw notFound('token');
    if (r.now) await this.statuses.revoked(principal.tenantId, jti);
    return { jti, revokedAt: r.revokedAt.toISOString() };
  }
}

function toDto(r: Awaited<ReturnType<AuthRepository['listTokens']>>[number]): TokenRecordDto {
  return {
    jti: r.jti,
    subject: r.subject,
    scopes: r.scopes,
    pool: r.pool,
    lastSeenAt: r.lastSeenAt?.toISOString() ?? null,
    description: r.description,
    createdBy: r.createdBy,
    createdAt: r.createdAt.toISOString(),
    expiresAt: r.expiresAt.toISOString(),
    revokedAt: r.revokedAt?.toISOString() ?? null,
  };
}
