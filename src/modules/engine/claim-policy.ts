import type { ChainPlugins } from './chain';
import type { ClaimOptions } from './engine.store';
import { TenantActivity } from './tenant-activity';

export interface ClaimPolicySettings {
  workerId: string;
  leaseMs: number;
  /** ORDO_TENANT_MAX_IN_FLIGHT. */
  tenantCap: number;
  /** ORDO_TENANT_SHARED_IN_FLIGHT: the cap (per unit of fair-share weight) while tenants share the engine (0: none). */
  sharedCap: number;
  /** ORDO_TENANT_SHARED_WINDOW_MS. */
  sharedWindowMs: number;
  traits: ChainPlugins;
}

/**
 * What this worker's claims and hops are given: room for some steps, its lease, the tenant cap, and
 * the shared cap while tenants share the engine (work of two of them seen within the window: see
 * TenantActivity), decided from the worker's own wake-ups and starts, with no query. Each tenant's
 * own cap is applied in the database (ordo_in_flight_cap), from its plan.
 */
export class ClaimPolicy {
  private readonly activity: TenantActivity;

  constructor(private readonly s: ClaimPolicySettings) {
    this.activity = new TenantActivity(s.sharedWindowMs);
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
      tenantCap: this.s.tenantCap,
      ...(this.s.sharedCap > 0 && this.activity.shared(performance.now()) && { sharedCap: this.s.sharedCap }),
      receivesRunData: this.s.traits.receivesRunData,
    };
  }
}
