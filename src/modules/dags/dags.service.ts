import { Injectable } from '@nestjs/common';
import { Database } from '../../core/database/database';
import type { TenantTx } from '../../core/database/handles';
import { badRequest, notFound } from '../../core/errors/domain-error';
import { decodePageToken, encodePageToken } from '../../core/http/page-token';
import { YAML_TYPES } from '../../core/http/app-factory';
import { canonicalHash } from '../../core/json/canonical-json';
import { PluginRegistry } from '../plugins/plugin-registry';
import { TrustService } from '../trust/trust.service';
import { graphDot, graphJson, type DagGraphJson } from './dag-graph';
import { checkDagDefinition } from './dag-validation';
import { parseDagYaml } from './dag-yaml';
import { resolveSubDags } from './sub-dag-refs';
import {
  DagsRepository,
  type DagSignature,
  type DagSourceFormat,
  type DagStatusChange,
  type DagVersionRecord,
  type DagVersionStatus,
  type DagVersionSummary,
} from './dags.repository';
import type { DagListQuery, DagVersionDto, DagVersionSummaryDto, PublishedDagDto } from './dags.dto';

export interface PublishOptions {
  sourceFormat: DagSourceFormat;
  signature?: DagSignature;
  bundleHash?: string;
}

type PageKey = { d: string; v: number };
const isPageKey = (v: unknown): v is PageKey =>
  typeof v === 'object' &&
  v !== null &&
  typeof (v as PageKey).d === 'string' &&
  Number.isInteger((v as PageKey).v) &&
  (v as PageKey).v >= 0;

/** Publishing, reading and (dis)enabling immutable DAG versions. */
@Injectable()
export class DagsService {
  constructor(
    private readonly db: Database,
    private readonly repo: DagsRepository,
    private readonly plugins: PluginRegistry,
    private readonly trust: TrustService,
  ) {}

  /** The publish route's body: a parsed JSON object, or YAML text when the content type says so. */
  async publishBody(
    tenantId: string,
    owner: string,
    body: unknown,
    contentType: string | undefined,
    signatureJws?: string,
  ): Promise<PublishedDagDto> {
    const mime = (contentType ?? 'application/json').split(';')[0].trim().toLowerCase();
    if (YAML_TYPES.includes(mime)) {
      if (typeof body !== 'string') throw badRequest('YAML_INVALID', 'expected YAML text');
      const raw = parseDagYaml(body);
      return this.publish(tenantId, owner, raw, {
        sourceFormat: 'yaml',
        signature: await this.apiSignature(tenantId, raw, signatureJws),
      });
    }
    return this.publish(tenantId, owner, body, {
      sourceFormat: 'json',
      signature: await this.apiSignature(tenantId, body, signatureJws),
    });
  }

  /**
   * Validates and stores a definition as the DAG's next version. Identical content (same canonical
   * hash) returns the version that already holds it (`created: false`). Concurrent publishes of one
   * DAG serialize on its row: different contents get consecutive versions, equal contents one version.
   */
  async publish(
    tenantId: string,
    owner: string,
    rawDefinition: unknown,
    opts: PublishOptions,
  ): Promise<PublishedDagDto> {
    return this.db.withTenant(tenantId, (tx) => this.publishIn(tx, owner, rawDefinition, opts));
  }

  /** As publish, inside the caller's tenant transaction (a bundle publishes all its DAGs in one). */
  async publishIn(tx: TenantTx, owner: string, rawDefinition: unknown, opts: PublishOptions): Promise<PublishedDagDto> {
    const checked = checkDagDefinition(rawDefinition, this.plugins);
    const { warnings } = checked;
    // (`latest` child versions resolve before hashing: the version holds the number it runs.)
    const definition = await resolveSubDags(tx, this.repo, checked.definition);
    const contentHash = canonicalHash(definition);
    const dagId = definition.id;
    await this.trust.enforceDagSignaturePolicy(tx, opts.signature);
    const latest = await this.repo.lockDag(tx, dagId);
    const existing = await this.repo.findByContentHash(tx, dagId, contentHash);
    if (existing) return published(existing, false);
    const record = await this.repo.insertVersion(tx, {
      dagId,
      version: latest + 1,
      contentHash,
      definition,
      sourceFormat: opts.sourceFormat,
      owner,
      signature: opts.signature ?? null,
      bundleHash: opts.bundleHash ?? null,
      warnings,
    });
    return published(record, true);
  }

  /** Verifies X-Ordo-Dag-Signature: a detached JWS over the RFC 8785 canonical JSON of the submitted definition. */
  private async apiSignature(
    tenantId: string,
    raw: unknown,
    jws: string | undefined,
  ): Promise<DagSignature | undefined> {
    if (jws === undefined) return undefined;
    const signer = await this.trust.verifyDetachedJson(tenantId, raw, jws, 'DAG');
    return { kid: signer.kid, signer: signer.owner, alg: signer.alg, source: 'api' };
  }

  async list(
    tenantId: string,
    q: DagListQuery,
  ): Promise<{ items: DagVersionSummaryDto[]; nextPageToken: string | null }> {
    const after = decodePageToken(q.pageToken, isPageKey);
    const rows = await this.db.withTenant(tenantId, (tx) =>
      this.repo.list(tx, {
        limit: q.limit + 1,
        after: after && { dagId: after.d, version: after.v },
        status: q.status,
        dagId: q.dagId,
      }),
    );
    const items = rows.slice(0, q.limit);
    const last = items[items.length - 1];
    return {
      items: items.map(summaryDto),
      nextPageToken:
        rows.length > q.limit && last ? encodePageToken({ d: last.dagId, v: last.version } satisfies PageKey) : null,
    };
  }

  /** One version with its definition; with `version` omitted, the latest active one. */
  async get(tenantId: string, dagId: string, version?: number): Promise<DagVersionDto> {
    return this.db.withTenant(tenantId, async (tx) => {
      const record = await this.repo.findVersion(tx, dagId, version);
      if (!record) throw notFoundVersion(dagId, version);
      return versionDto(record, await this.repo.statusChanges(tx, dagId, record.version));
    });
  }

  /** Disables or re-enables a version (idempotent); each actual change is recorded with its actor. */
  async setStatus(
    tenantId: string,
    actor: string,
    dagId: string,
    version: number,
    status: DagVersionStatus,
  ): Promise<DagVersionDto> {
    return this.db.withTenant(tenantId, async (tx) => {
      const r = await this.repo.setStatus(tx, dagId, version, status, actor);
      if (!r) throw notFoundVersion(dagId, version);
      const record = await this.repo.findVersion(tx, dagId, version);
      return versionDto(record!, await this.repo.statusChanges(tx, dagId, version));
    });
  }

  async graph(
    tenantId: string,
    dagId: string,
    version: number,
    format: 'json' | 'dot',
  ): Promise<DagGraphJson | string> {
    const record = await this.db.withTenant(tenantId, (tx) => this.repo.findVersion(tx, dagId, version));
    if (!record) throw notFoundVersion(dagId, version);
    const steps = record.definition.steps;
    return format === 'dot' ? graphDot(`${dagId} v${version}`, steps) : graphJson(steps);
  }
}

function notFoundVersion(dagId: string, version: number | undefined) {
  return notFound(
    version === undefined ? `active version of DAG ${dagId}` : `DAG ${dagId} version ${version}`,
    'DAG_NOT_FOUND',
  );
}

function published(r: DagVersionRecord, created: boolean): PublishedDagDto {
  return {
    dagId: r.dagId,
    version: r.version,
    contentHash: r.contentHash,
    status: r.status,
    created,
    warnings: r.warnings,
  };
}

function summaryDto(r: DagVersionSummary): DagVersionSummaryDto {
  return {
    dagId: r.dagId,
    version: r.version,
    status: r.status,
    contentHash: r.contentHash,
    sourceFormat: r.sourceFormat,
    owner: r.owner,
    signature: r.signature,
    bundleHash: r.bundleHash,
    createdAt: r.createdAt.toISOString(),
    disabledAt: r.disabledAt?.toISOString() ?? null,
  };
}

function versionDto(r: DagVersionRecord, changes: DagStatusChange[]): DagVersionDto {
  return {
    ...summaryDto(r),
    definition: r.definition,
    statusHistory: changes.map((c) => ({ status: c.status, actor: c.actor, changedAt: c.changedAt.toISOString() })),
    warnings: r.warnings,
  };
}
