import { Injectable } from '@nestjs/common';
import { sql } from 'kysely';
import { Database } from '../../core/database/database';
import type { EffectiveLimits } from './plan-limits';

/** A tenant's plan as the limits' enforcers see it: its effective limits and its quota time zone. */
export interface TenantPlanView {
  planId: string;
  limits: EffectiveLimits;
  timeZone: string;
}

/** How long a tenant's limits are reused before they are read again: plan changes apply within it. */
export const TENANT_LIMITS_TTL_MS = 2_000;

/**
 * Each tenant's effective limits (ordo_tenant_limits), cached per process for TENANT_LIMITS_TTL_MS,
 * for the checks that run on every request (rate limits) and must not cost a query each. Checks that
 * must be exact against concurrent writers (quotas at run creation) read the limits in their own
 * statement instead.
 */
@Injectable()
export class TenantLimits {
  private readonly cache = new Map<string, { at: number; plan: Promise<TenantPlanView | null> }>();

  constructor(private readonly db: Database) {}

  /** The tenant's plan and effective limits; null when it has no plan. */
  get(tenantId: string): Promise<TenantPlanView | null> {
    const now = performance.now();
    const hit = this.cache.get(tenantId);
    if (hit && now - hit.at < TENANT_LIMITS_TTL_MS) return hit.plan;
    const plan = this.read(tenantId);
    this.cache.set(tenantId, { at: now, plan });
    plan.catch(() => this.cache.delete(tenantId));
    return plan;
  }

  /** Forgets a tenant's cached limits (this process changed them). */
  forget(tenantId?: string): void {
    if (tenantId === undefined) this.cache.clear();
    else this.cache.delete(tenantId);
  }

  private async read(tenantId: string): Promise<TenantPlanView | null> {
    const { rows } = await sql<{ plan_id: string; limits: EffectiveLimits; time_zone: string }>`
      select plan_id, limits, time_zone from ordo_tenant_limits(${tenantId})`.execute(this.db.system);
    const r = rows[0];
    return r ? { planId: r.plan_id, limits: r.limits, timeZone: r.time_zone } : null;
  }
}
