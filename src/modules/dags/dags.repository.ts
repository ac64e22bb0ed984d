import { Injectable } from '@nestjs/common';
import { sql, type Selectable } from 'kysely';
import type { DagVersion as DagVersionTable } from '../../core/database/db.generated';
import { tenantOf, type TenantTx } from '../../core/database/handles';
import type { DagDefinition } from './dag-definition';
import type { DagWarning } from './dag-publish-checks';

export type DagVersionStatus = 'active' | 'disabled';
export type DagSourceFormat = 'json' | 'yaml';

/** Who signed a version's content, when it was signed. */
export interface DagSignature {
  kid: string;
  signer: string;
  alg: string;
  source: 'api' | 'bundle';
}

/** One stored, immutable DAG version. */
export interface DagVersionRecord {
  dagId: string;
  version: number;
  status: DagVersionStatus;
  definition: DagDefinition;
  contentHash: string;
  sourceFormat: DagSourceFormat;
  owner: string;
  signature: DagSignature | null;
  bundleHash: string | null;
  createdAt: Date;
  disabledAt: Date | null;
  /** What publishing found that may fail at run time. */
  warnings: DagWarning[];
}

/** A version's place in the listing, without its definition and warnings. */
export type DagVersionSummary = Omit<DagVersionRecord, 'definition' | 'warnings'>;

export interface DagStatusChange {
  status: DagVersionStatus;
  actor: string;
  changedAt: Date;
}

export interface NewDagVersion {
  dagId: string;
  version: number;
  contentHash: string;
  definition: DagDefinition;
  sourceFormat: DagSourceFormat;
  owner: string;
  signature: DagSignature | null;
  bundleHash: string | null;
  warnings?: DagWarning[];
}

const SUMMARY_COLUMNS = [
  'dag_id',
  'version',
  'status',
  'content_hash',
  'source_format',
  'owner',
  'signature',
  'bundle_hash',
  'created_at',
  'disabled_at',
] as const;

type SummaryRow = Pick<Selectable<DagVersionTable>, (typeof SUMMARY_COLUMNS)[number]>;

function toSummary(r: SummaryRow): DagVersionSummary {
  return {
    dagId: r.dag_id,
    version: r.version,
    status: r.status as DagVersionStatus,
    contentHash: r.content_hash,
    sourceFormat: r.source_format as DagSourceFormat,
    owner: r.owner,
    signature: (r.signature ?? null) as DagSignature | null,
    bundleHash: r.bundle_hash,
    createdAt: new Date(r.created_at),
    disabledAt: r.disabled_at === null ? null : new Date(r.disabled_at),
  };
}

const RECORD_COLUMNS = [...SUMMARY_COLUMNS, 'definition', 'warnings'] as const;

function toRecord(r: SummaryRow & { definition: unknown; warnings: unknown }): DagVersionRecord {
  return { ...toSummary(r), definition: r.definition as DagDefinition, warnings: r.warnings as DagWarning[] };
}

/** DAGs and their versions. Every query is bound to the transaction's tenant. */
@Injectable()
export class DagsRepository {
  /**
   * A version of a DAG; with `version` omitted, the highest ACTIVE version. Undefined when the DAG,
   * the version, or (for the latest) any active version does not exist in this tenant.
   */
  async findVersion(tx: TenantTx, dagId: string, version?: number): Promise<DagVersionRecord | undefined> {
    let q = tx
      .selectFrom('dag_version')
      .select([...RECORD_COLUMNS])
      .where('tenant_id', '=', tenantOf(tx))
      .where('dag_id', '=', dagId);
    q =
      version === undefined
        ? q.where('status', '=', 'active').orderBy('version', 'desc').limit(1)
        : q.where('version', '=', version);
    const row = await q.executeTakeFirst();
    return row && toRecord(row);
  }

  async findByContentHash(tx: TenantTx, dagId: string, contentHash: string): Promise<DagVersionRecord | undefined> {
    const row = await tx
      .selectFrom('dag_version')
      .select([...RECORD_COLUMNS])
      .where('tenant_id', '=', tenantOf(tx))
      .where('dag_id', '=', dagId)
      .where('content_hash', '=', contentHash)
      .executeTakeFirst();
    return row && toRecord(row);
  }

  /**
   * Creates the DAG row when missing, then locks it for the rest of the transaction and returns its
   * latest version number (0 for a new DAG). Concurrent publishers of one DAG serialize here.
   */
  async lockDag(tx: TenantTx, dagId: string): Promise<number> {
    const tenantId = tenantOf(tx);
    await tx
      .insertInto('dag')
      .values({ tenant_id: tenantId, dag_id: dagId, latest_version: 0 })
      .onConflict((oc) => oc.columns(['tenant_id', 'dag_id']).doNothing())
      .execute();
    const row = await tx
      .selectFrom('dag')
      .select('latest_version')
      .where('tenant_id', '=', tenantId)
      .where('dag_id', '=', dagId)
      .forUpdate()
      .executeTakeFirstOrThrow();
    return row.latest_version;
  }

  /** Inserts a version and advances the DAG's latest version to it (call after lockDag). */
  async insertVersion(tx: TenantTx, v: NewDagVersion): Promise<DagVersionRecord> {
    const tenantId = tenantOf(tx);
    const row = await tx
      .insertInto('dag_version')
      .values({
        tenant_id: tenantId,
        dag_id: v.dagId,
        version: v.version,
        content_hash: v.contentHash,
        definition: JSON.stringify(v.definition),
        source_format: v.sourceFormat,
        owner: v.owner,
        signature: v.signature === null ? null : JSON.stringify(v.signature),
        bundle_hash: v.bundleHash,
        warnings: JSON.stringify(v.warnings ?? []),
      })
      .returning([...RECORD_COLUMNS])
      .executeTakeFirstOrThrow();
    await tx
      .updateTable('dag')
      .set({ latest_version: v.version })
      .where('tenant_id', '=', tenantId)
      .where('dag_id', '=', v.dagId)
      .execute();
    return toRecord(row);
  }

  /**
   * Sets a version's status and records who changed it. Returns the version after the change, or
   * undefined when it does not exist; `changed` is false when it already had that status.
   */
  async setStatus(
    tx: TenantTx,
    dagId: string,
    version: number,
    status: DagVersionStatus,
    actor: string,
  ): Promise<{ record: DagVersionSummary; changed: boolean } | undefined> {
    const tenantId = tenantOf(tx);
    const updated = await tx
      .updateTable('dag_version')
      .set({ status, disabled_at: status === 'disabled' ? sql<Date>`now()` : null })
      .where('tenant_id', '=', tenantId)
      .where('dag_id', '=', dagId)
      .where('version', '=', version)
      .where('status', '<>', status)
      .returning([...SUMMARY_COLUMNS])
      .executeTakeFirst();
    if (updated) {
      await tx
        .insertInto('dag_version_status_change')
        .values({ tenant_id: tenantId, dag_id: dagId, version, status, actor })
        .execute();
      return { record: toSummary(updated), changed: true };
    }
    const current = await tx
      .selectFrom('dag_version')
      .select([...SUMMARY_COLUMNS])
      .where('tenant_id', '=', tenantId)
      .where('dag_id', '=', dagId)
      .where('version', '=', version)
      .executeTakeFirst();
    return current && { record: toSummary(current), changed: false };
  }

  /** Status changes of one version, oldest first. */
  async statusChanges(tx: TenantTx, dagId: string, version: number): Promise<DagStatusChange[]> {
    const rows = await tx
      .selectFrom('dag_version_status_change')
      .select(['status', 'actor', 'changed_at'])
      .where('tenant_id', '=', tenantOf(tx))
      .where('dag_id', '=', dagId)
      .where('version', '=', version)
      .orderBy('changed_at')
      .execute();
    return rows.map((r) => ({
      status: r.status as DagVersionStatus,
      actor: r.actor,
      changedAt: new Date(r.changed_at),
    }));
  }

  /** Versions ordered by dag_id ascending, then version descending, after the keyset `after`. */
  async list(
    tx: TenantTx,
    q: { limit: number; after?: { dagId: string; version: number }; status?: DagVersionStatus; dagId?: string },
  ): Promise<DagVersionSummary[]> {
    let query = tx
      .selectFrom('dag_version')
      .select([...SUMMARY_COLUMNS])
      .where('tenant_id', '=', tenantOf(tx));
    if (q.status !== undefined) query = query.where('status', '=', q.status);
    if (q.dagId !== undefined) query = query.where('dag_id', '=', q.dagId);
    const after = q.after;
    if (after !== undefined) {
      query = query.where((eb) =>
        eb.or([
          eb('dag_id', '>', after.dagId),
          eb.and([eb('dag_id', '=', after.dagId), eb('version', '<', after.version)]),
        ]),
      );
    }
    const rows = await query.orderBy('dag_id', 'asc').orderBy('version', 'desc').limit(q.limit).execute();
    return rows.map(toSummary);
  }
}
