import { Injectable } from '@nestjs/common';
import { Database } from '../../core/database/database';
import { conflict, notFound } from '../../core/errors/domain-error';
import { decodePageToken, encodePageToken } from '../../core/http/page-token';
import type { TenantScope } from '../../core/http/route-spec';
import { TokensService } from '../auth/tokens.service';
import type { CreateTenantBody, TenantDto } from './tenants.dto';
import { TenantsRepository, type TenantRow } from './tenants.repository';

const isAfter = (v: unknown): v is { id: string } =>
  typeof v === 'object' && v !== null && typeof (v as { id: unknown }).id === 'string';

/** Tenant lifecycle for platform operators (scope platform:admin). */
@Injectable()
export class TenantsService {
  constructor(
    private readonly db: Database,
    private readonly repo: TenantsRepository,
    private readonly tokens: TokensService,
  ) {}

  async create(body: CreateTenantBody): Promise<TenantDto> {
    const row = await this.repo.insert(this.db.system, body);
    if (!row) throw conflict('TENANT_EXISTS', `tenant ${body.id} already exists`);
    return toDto(row);
  }

  async list(q: { limit: number; pageToken?: string }) {
    const after = decodePageToken(q.pageToken, isAfter);
    const rows = await this.repo.list(this.db.system, { limit: q.limit + 1, afterId: after?.id });
    const items = rows.slice(0, q.limit).map(toDto);
    return { items, nextPageToken: rows.length > q.limit ? encodePageToken({ id: rows[q.limit - 1].id }) : null };
  }

  /** The tenant, or NOT_FOUND. */
  async get(id: string): Promise<TenantDto> {
    const row = await this.repo.find(this.db.system, id);
    if (!row) throw notFound(`tenant ${id}`);
    return toDto(row);
  }

  async setStatus(id: string, status: 'active' | 'disabled'): Promise<TenantDto> {
    const row = await this.repo.setStatus(this.db.system, id, status);
    if (!row) throw notFound('tenant');
    await this.tokens.tenantStatusChanged(id);
    return toDto(row);
  }

  /** An operator mints a token for a tenant (typically its first admin token). */
  async mintToken(
    operator: string,
    tenantId: string,
    body: { subject?: string; scopes: TenantScope[]; ttlSeconds?: number; description?: string },
  ) {
    await this.get(tenantId);
    const scopes = [...new Set(body.scopes)].sort();
    return this.tokens.mintFor(
      tenantId,
      body.subject ?? `${tenantId}-admin`,
      scopes,
      `platform:${operator}`,
      body.ttlSeconds,
      body.description,
    );
  }
}

export function toDto(r: TenantRow): TenantDto {
  return {
    id: r.id,
    name: r.name,
    status: r.status as TenantDto['status'],
    createdAt: r.created_at.toISOString(),
    disabledAt: r.disabled_at?.toISOString() ?? null,
  };
}
