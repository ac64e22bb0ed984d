import { Injectable } from '@nestjs/common';
import { tenantOf, type TenantTx } from '../../core/database/handles';
import type { BundleManifest } from './bundle-format';

export type BundleFileKind = 'dag' | 'script' | 'file';

/** A DAG version a bundle published (or found already published with the same content). */
export interface BundleDagRef {
  path: string;
  dagId: string;
  version: number;
}

export interface BundleRecord {
  bundleHash: string;
  name: string;
  version: string;
  owner: string;
  manifest: BundleManifest;
  kid: string;
  dags: BundleDagRef[];
  importedBy: string;
  importedAt: Date;
}

export interface NewBundleFile {
  path: string;
  kind: BundleFileKind;
  sha256: string;
  content: Buffer;
}

const COLUMNS = [
  'bundle_hash',
  'name',
  'version',
  'owner',
  'manifest',
  'kid',
  'dags',
  'imported_by',
  'imported_at',
] as const;
type Row = {
  bundle_hash: string;
  name: string;
  version: string;
  owner: string;
  manifest: unknown;
  kid: string;
  dags: unknown;
  imported_by: string;
  imported_at: Date;
};
const toRecord = (r: Row): BundleRecord => ({
  bundleHash: r.bundle_hash,
  name: r.name,
  version: r.version,
  owner: r.owner,
  manifest: r.manifest as BundleManifest,
  kid: r.kid,
  dags: r.dags as BundleDagRef[],
  importedBy: r.imported_by,
  importedAt: r.imported_at,
});

/** Imported bundles, their file index and the content-addressed file contents. */
@Injectable()
export class BundlesRepository {
  async findByHash(tx: TenantTx, bundleHash: string): Promise<BundleRecord | undefined> {
    const row = await tx
      .selectFrom('bundle')
      .select(COLUMNS)
      .where('tenant_id', '=', tenantOf(tx))
      .where('bundle_hash', '=', bundleHash)
      .executeTakeFirst();
    return row && toRecord(row);
  }

  async findByNameVersion(tx: TenantTx, name: string, version: string): Promise<BundleRecord | undefined> {
    const row = await tx
      .selectFrom('bundle')
      .select(COLUMNS)
      .where('tenant_id', '=', tenantOf(tx))
      .where('name', '=', name)
      .where('version', '=', version)
      .executeTakeFirst();
    return row && toRecord(row);
  }

  /** Newest first; keyset after (importedAt, bundleHash). */
  async list(
    tx: TenantTx,
    page: { limit: number; name?: string; after?: { importedAt: Date; bundleHash: string } },
  ): Promise<BundleRecord[]> {
    let q = tx.selectFrom('bundle').select(COLUMNS).where('tenant_id', '=', tenantOf(tx));
    if (page.name !== undefined) q = q.where('name', '=', page.name);
    if (page.after) {
      const a = page.after;
      q = q.where((eb) =>
        eb.or([
          eb('imported_at', '<', a.importedAt),
          eb.and([eb('imported_at', '=', a.importedAt), eb('bundle_hash', '>', a.bundleHash)]),
        ]),
      );
    }
    const rows = await q.orderBy('imported_at', 'desc').orderBy('bundle_hash', 'asc').limit(page.limit).execute();
    return rows.map(toRecord);
  }

  /** Stores the bundle row, its files' contents (deduplicated by hash) and its file index: three statements. */
  async insert(
    tx: TenantTx,
    b: {
      bundleHash: string;
      manifest: BundleManifest;
      signature: string;
      kid: string;
      dags: BundleDagRef[];
      importedBy: string;
    },
    files: NewBundleFile[],
  ): Promise<BundleRecord> {
    const tenant = tenantOf(tx);
    const blobs = new Map(files.map((f) => [f.sha256, f.content]));
    if (blobs.size > 0) {
      await tx
        .insertInto('bundle_blob')
        .values([...blobs].map(([sha256, content]) => ({ tenant_id: tenant, sha256, size: content.length, content })))
        .onConflict((oc) => oc.columns(['tenant_id', 'sha256']).doNothing())
        .execute();
    }
    const row = await tx
      .insertInto('bundle')
      .values({
        tenant_id: tenant,
        bundle_hash: b.bundleHash,
        name: b.manifest.name,
        version: b.manifest.version,
        owner: b.manifest.owner,
        manifest: JSON.stringify(b.manifest),
        signature: b.signature,
        kid: b.kid,
        dags: JSON.stringify(b.dags),
        imported_by: b.importedBy,
      })
      .returning(COLUMNS)
      .executeTakeFirstOrThrow();
    if (files.length > 0) {
      await tx
        .insertInto('bundle_file')
        .values(
          files.map((f) => ({
            tenant_id: tenant,
            bundle_hash: b.bundleHash,
            path: f.path,
            kind: f.kind,
            sha256: f.sha256,
            size: f.content.length,
          })),
        )
        .execute();
    }
    return toRecord(row);
  }

  /** One shipped file's content, by the bundle's hash or by its name and version. */
  async readFile(
    tx: TenantTx,
    ref: { bundleHash: string } | { name: string; version: string },
    path: string,
  ): Promise<Buffer | undefined> {
    let q = tx
      .selectFrom('bundle_file')
      .innerJoin('bundle', (j) =>
        j
          .onRef('bundle.tenant_id', '=', 'bundle_file.tenant_id')
          .onRef('bundle.bundle_hash', '=', 'bundle_file.bundle_hash'),
      )
      .innerJoin('bundle_blob', (j) =>
        j
          .onRef('bundle_blob.tenant_id', '=', 'bundle_file.tenant_id')
          .onRef('bundle_blob.sha256', '=', 'bundle_file.sha256'),
      )
      .select('bundle_blob.content')
      .where('bundle_file.tenant_id', '=', tenantOf(tx))
      .where('bundle_file.path', '=', path);
    q =
      'bundleHash' in ref
        ? q.where('bundle.bundle_hash', '=', ref.bundleHash)
        : q.where('bundle.name', '=', ref.name).where('bundle.version', '=', ref.version);
    const row = await q.executeTakeFirst();
    return row?.content;
  }

  async files(
    tx: TenantTx,
    bundleHash: string,
  ): Promise<{ path: string; kind: string; sha256: string; size: number }[]> {
    return tx
      .selectFrom('bundle_file')
      .select(['path', 'kind', 'sha256', 'size'])
      .where('tenant_id', '=', tenantOf(tx))
      .where('bundle_hash', '=', bundleHash)
      .orderBy('path')
      .execute();
  }
}
