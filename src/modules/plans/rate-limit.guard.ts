import { Injectable, type CanActivate, type ExecutionContext } from '@nestjs/common';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { requestState } from '../../core/http/request-context';
import { LimitHits } from './limit-hits';
import type { LimitName } from './plan-limits';
import { noteGuardLimits } from './rate-limit-context';
import { rateLimitFields, type CheckedLimit } from './rate-limit-fields';
import { rateLimited, rateLimiterUnavailable } from './rate-limit.errors';
import { RateLimitStore, RateLimitStoreUnavailable, type Window } from './rate-limit-store';
import { TenantLimits } from './tenant-limits';

/**
 * requestsPerSecondPerToken (counted per token id) and requestsPerSecondPerTenant (all the tenant's
 * tokens, worker tokens included) on every route a tenant or worker token passed authentication
 * for. A request over either is 429 RATE_LIMITED with Retry-After; every limited answer carries the
 * RateLimit fields. Tenants without these limits pay no query. A store that does not answer
 * refuses limited requests (503 RATE_LIMITER_UNAVAILABLE).
 */
@Injectable()
export class RequestRateLimitGuard implements CanActivate {
  constructor(
    private readonly limits: TenantLimits,
    private readonly store: RateLimitStore,
    private readonly hits: LimitHits,
  ) {}

  async canActivate(ctx: ExecutionContext): Promise<boolean> {
    if (ctx.getType() !== 'http') return true;
    const req = ctx.switchToHttp().getRequest<FastifyRequest>();
    const p = requestState(req).principal;
    if (p?.kind !== 'tenant' && p?.kind !== 'worker') return true;
    const plan = (await this.limits.get(p.tenantId))?.limits;
    const checks: { limit: LimitName; key: string; w: Window }[] = [];
    if (plan?.requestsPerSecondPerToken)
      checks.push({
        limit: 'requestsPerSecondPerToken',
        key: `token:${p.jti}`,
        w: { limit: plan.requestsPerSecondPerToken, windowSeconds: 1 },
      });
    if (plan?.requestsPerSecondPerTenant)
      checks.push({
        limit: 'requestsPerSecondPerTenant',
        key: `tenant:${p.tenantId}`,
        w: { limit: plan.requestsPerSecondPerTenant, windowSeconds: 1 },
      });
    if (checks.length === 0) return true;
    let checked: CheckedLimit[];
    try {
      checked = await Promise.all(
        checks.map(async (c) => ({ limit: c.limit, state: await this.store.take(c.key, 1, c.w) })),
      );
    } catch (e) {
      if (e instanceof RateLimitStoreUnavailable) throw rateLimiterUnavailable();
      throw e;
    }
    const refused = checked.filter((c) => !c.state.allowed);
    if (refused.length > 0) {
      for (const c of refused) this.hits.record(p.tenantId, c.limit);
      throw rateLimited(checked, `${req.method} request`);
    }
    noteGuardLimits(req, checked);
    void ctx.switchToHttp().getResponse<FastifyReply>().headers(rateLimitFields(checked));
    return true;
  }
}
