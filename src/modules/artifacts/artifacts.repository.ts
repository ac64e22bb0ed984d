import { Injectable } from '@nestjs/common';
import { sql } from 'kysely';
import { createHash } from 'node:crypto';
import { tenantOf, type SystemTx, type TenantTx } from '../../core/database/handles';
import { canonicalJson } from '../../core/json/canonical-json';

export interface NewArtifact {
  tenantId: string;
  sha256: string;
  mediaType: string;
  /** Canonical JSON text of the body. */
  json: string;
}

/** A JSON artifact addressed by the SHA-256 of its RFC 8785 canonical form. */
export function jsonArtifact(tenantId: string, value: unknown, mediaType = 'application/json'): NewArtifact {
  const json = canonicalJson(value);
  return { tenantId, sha256: createHash('sha256').update(json, 'utf8').digest('hex'), mediaType, json };
}

/** Content-addressed blobs per tenant (step outputs and logs). */
@Injectable()
export class ArtifactsRepository {
  /** Stores artifacts once per (tenant, hash, day); repeated content is not written again. */
  async insertMany(tx: SystemTx | TenantTx, items: NewArtifact[]): Promise<void> {
    const uniq = new Map(items.map((a) => [`${a.tenantId}/${a.sha256}`, a]));
    if (uniq.size === 0) return;
    const list = [...uniq.values()];
    await sql`
      insert into artifact (tenant_id, sha256, media_type, size, body_json)
      select u.tenant_id, u.sha256, u.media_type, octet_length(u.body), u.body::jsonb
      from unnest(${list.map((a) => a.tenantId)}::text[], ${list.map((a) => a.sha256)}::text[],
        ${list.map((a) => a.mediaType)}::text[], ${list.map((a) => a.json)}::text[]) as u(tenant_id, sha256, media_type, body)
      on conflict do nothing`.execute(tx);
  }

  async find(tx: TenantTx, sha256: string) {
    return tx
      .selectFrom('artifact')
      .select(['sha256', 'media_type', 'size', 'body_json', 'body_bytes', 'created_at'])
      .where('tenant_id', '=', tenantOf(tx))
      .where('sha256', '=', sha256)
      .orderBy('created_on', 'desc')
      .limit(1)
      .executeTakeFirst();
  }

  /** Bodies of JSON artifacts by hash (system work, e.g. large step outputs for templating). */
  async jsonBodies(tx: SystemTx, keys: { tenantId: string; sha256: string }[]): Promise<Map<string, unknown>> {
    if (keys.length === 0) return new Map();
    const r = await sql<{ tenant_id: string; sha256: string; body_json: unknown }>`
      select distinct on (a.tenant_id, a.sha256) a.tenant_id, a.sha256, a.body_json from artifact a
      join unnest(${keys.map((k) => k.tenantId)}::text[], ${keys.map((k) => k.sha256)}::text[]) as k(tenant_id, sha256)
        on a.tenant_id = k.tenant_id and a.sha256 = k.sha256`.execute(tx);
    return new Map(r.rows.map((x) => [`${x.tenant_id}/${x.sha256}`, x.body_json]));
  }
}
