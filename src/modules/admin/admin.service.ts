import { Inject, Injectable } from '@nestjs/common';
import type { OrdoConfig } from '../../core/config/config';
import { ORDO_CONFIG } from '../../core/config/config.module';
import { Database } from '../../core/database/database';
import { notFound } from '../../core/errors/domain-error';
import { decodePageToken, encodePageToken } from '../../core/http/page-token';
import { AuditLogRepository } from '../export/audit-log.repository';
import type { AuditQuery, QueuesDto, QueuesQuery } from './admin.dto';
import { AdminRepository, type TenantQueueRow } from './admin.repository';

/** Claims per second are counted over this many seconds of attempts. */
export const CLAIMS_WINDOW_SECONDS = 60;

const isAfterId = (v: unknown): v is { id: string } =>
  typeof v === 'object' && v !== null && typeof (v as { id: unknown }).id === 'string';
const isBeforeSeq = (v: unknown): v is { seq: number } =>
  typeof v === 'object' && v !== null && Number.isSafeInteger((v as { seq: unknown }).seq);

/** The platform operator's view of the tenants' queues and of the operator audit log. */
@Injectable()
export class AdminService {
  constructor(
    private readonly db: Database,
    private readonly repo: AdminRepository,
    private readonly audit: AuditLogRepository,
    @Inject(ORDO_CONFIG) private readonly config: OrdoConfig,
  ) {}

  /** A page of tenants by id with their queue figures; 404 for an unknown tenant filter. */
  async queues(q: QueuesQuery): Promise<QueuesDto> {
    if (q.tenantId !== undefined) await this.requireTenant(q.tenantId);
    const after = decodePageToken(q.pageToken, isAfterId);
    const rows = await this.repo.queues(this.db.system, {
      tenantId: q.tenantId,
      afterId: after?.id,
      limit: q.limit + 1,
      claimsWindowSeconds: CLAIMS_WINDOW_SECONDS,
      cap: this.config.ORDO_TENANT_MAX_IN_FLIGHT,
      sharedCap: this.config.ORDO_TENANT_SHARED_IN_FLIGHT,
    });
    const page = rows.slice(0, q.limit);
    const clock = rows[0] ?? null;
    return {
      at: (clock?.at ?? new Date()).toISOString(),
      claimsWindowSeconds: CLAIMS_WINDOW_SECONDS,
      limitHitsSince: (clock?.hits_since ?? minuteBefore(new Date())).toISOString(),
      items: page.map((r) => this.toDto(r)),
      nextPageToken: rows.length > q.limit ? encodePageToken({ id: page[page.length - 1].tenant_id }) : null,
    };
  }

  /** A page of the operator audit log, newest first; 404 for an unknown tenant filter. */
  async auditPage(q: AuditQuery) {
    if (q.tenantId !== undefined) await this.requireTenant(q.tenantId);
    const before = decodePageToken(q.pageToken, isBeforeSeq);
    const rows = await this.audit.page(this.db.system, {
      tenantId: q.tenantId,
      beforeSeq: before?.seq,
      limit: q.limit + 1,
      order: 'desc',
    });
    const items = rows.slice(0, q.limit);
    return {
      items,
      nextPageToken: rows.length > q.limit ? encodePageToken({ seq: items[items.length - 1].seq }) : null,
    };
  }

  async requireTenant(tenantId: string): Promise<void> {
    if (!(await this.repo.tenantExists(this.db.system, tenantId))) throw notFound(`tenant ${tenantId}`);
  }

  private toDto(r: TenantQueueRow): QueuesDto['items'][number] {
    return {
      tenantId: r.tenant_id,
      plan: r.plan_id === null ? null : { id: r.plan_id, limits: r.limits ?? {} },
      steps: { ready: Number(r.ready), waiting: Number(r.waiting), inFlight: Number(r.in_flight) },
      inFlightCap: r.in_flight_cap,
      sharedInFlightCap: r.shared_in_flight_cap,
      oldestReadySeconds: r.oldest_ready_seconds === null ? null : Math.max(0, Number(r.oldest_ready_seconds)),
      claimsPerSecond: Number(r.claims) / CLAIMS_WINDOW_SECONDS,
      limitHits: (r.hits ?? []).map((h) => ({ limit: h.limit, hits: Number(h.hits) })),
    };
  }
}

function minuteBefore(d: Date): Date {
  const m = new Date(d);
  m.setUTCSeconds(0, 0);
  return new Date(m.getTime() - 60_000);
}
