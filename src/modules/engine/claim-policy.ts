import type { ChainPlugins } from './chain';
import type { ClaimOptions } from './engine.store';
import { TenantActivity } from './tenant-activity';

export interface ClaimPolicySettings {
  workerId: string;
  leaseMs: number;
  /** ORDO_TENANT_MAX_IN_FLIGHT. */
  tenantCap: number;
  /** ORDO_TENANT_SHARED_IN_FLIGHT: the cap while tenants share the engine (0: the full cap always). */
  sharedCap: number;
  /** ORDO_TENANT_SHARED_WINDOW_MS. */
  sharedWindowMs: number;
  traits: ChainPlugins;
}

/**
 * What this worker's claims and hops are given: room for some steps, its lease, and the tenant cap,
 * the shared one while tenants share the engine (work of two of them seen within the window: see
 * TenantActivity), decided from the worker's own wake-ups and starts, with no query.
 */
export class ClaimPolicy {
  private readonly activity: TenantActivity;
  private readonly sharedCap: number;

  constructor(private readonly s: ClaimPolicySettings) {
    this.activity = new TenantActivity(s.sharedWindowMs);
    this.sharedCap = s.sharedCap > 0 ? Math.min(s.tenantCap, s.sharedCap) : s.tenantCap;
  }

  /** Work of `tenantId` was announced or started here. */
  seen(tenantId: string): void {
    this.activity.seen(tenantId, performance.now());
  }

  options(capacity: number): ClaimOptions {
    return {
      workerId: this.s.workerId,
      capacity,
      leaseMs: this.s.leaseMs,
      tenantCap: this.activity.shared(performance.now()) ? this.sharedCap : this.s.tenantCap,
      receivesRunData: this.s.traits.receivesRunData,
    };
  }
}
