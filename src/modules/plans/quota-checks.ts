import { Injectable } from '@nestjs/common';
import { Database } from '../../core/database/database';
import type { QuotaRefusal } from './quota-exceeded';
import { PlansRepository } from './plans.repository';
import { TenantLimits } from './tenant-limits';

/** How long a tenant's stored artifact bytes are reused before they are summed again. */
export const STORED_BYTES_TTL_MS = 5_000;

/**
 * The quotas checked in the processes that store artifacts and make exports, against the
 * tenant's effective limits (TenantLimits, cached). A tenant without the limit costs a cache look-up.
 */
@Injectable()
export class QuotaChecks {
  private readonly stored = new Map<string, { at: number; bytes: Promise<number>; added: number }>();

  constructor(
    private readonly db: Database,
    private readonly repo: PlansRepository,
    private readonly limits: TenantLimits,
  ) {}

  /**
   * Whether `bytes()` more of artifacts keep the tenant within maxArtifactBytes; the refusal if not
   * (`bytes` is only called for a tenant with the limit).
   * The stored bytes are summed at most every STORED_BYTES_TTL_MS per process, with what this
   * process accepted since added: steps finishing in other processes within that window can take
   * the tenant past the limit by their outputs, never by more.
   */
  async artifactRefusal(tenantId: string, bytes: () => number): Promise<QuotaRefusal | null> {
    const max = (await this.limits.get(tenantId))?.limits.maxArtifactBytes;
    if (max === undefined || max === null) return null;
    const now = performance.now();
    let hit = this.stored.get(tenantId);
    if (!hit || now - hit.at >= STORED_BYTES_TTL_MS) {
      const read = this.db.withSystem((tx) => this.repo.artifactBytes(tx, tenantId));
      hit = { at: now, bytes: read, added: 0 };
      this.stored.set(tenantId, hit);
      read.catch(() => this.stored.delete(tenantId));
    }
    const entry = hit;
    const size = bytes();
    const current = (await entry.bytes) + entry.added;
    if (current + size > max) return { limit: 'maxArtifactBytes', value: max, current };
    entry.added += size;
    return null;
  }

  /** The tenant's maxExportBytes, or null without one. */
  async exportLimit(tenantId: string): Promise<number | null> {
    return (await this.limits.get(tenantId))?.limits.maxExportBytes ?? null;
  }
}
