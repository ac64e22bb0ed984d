import { Inject, Injectable, Optional } from '@nestjs/common';
import { Database } from '../../core/database/database';
import type { TenantTx } from '../../core/database/handles';
import { DomainError, notFound } from '../../core/errors/domain-error';
import { decodePageToken, encodePageToken } from '../../core/http/page-token';
import { parseDagYaml } from '../dags/dag-yaml';
import { DagsService } from '../dags/dags.service';
import { TrustService, type VerifiedSigner } from '../trust/trust.service';
import { inlineScriptRefs } from './script-refs';
import { BundleError, DEFAULT_BUNDLE_LIMITS, type BundleLimits } from './bundle-format';
import { readBundle, type ReadBundle } from './bundle-reader';
import type { BundleDto, ImportedBundleDto } from './bundles.dto';
import { BundlesRepository, type BundleDagRef, type BundleFileKind, type BundleRecord } from './bundles.repository';

/** Overrides of the default bundle limits (tests, operators). */
export const BUNDLE_LIMITS = 'ordo:bundle-limits';

/** A reference to an imported bundle: its hash, or its name and version. */
export type BundleRef = { bundleHash: string } | { name: string; version: string };

type PageKey = { i: string; h: string };
const isPageKey = (v: unknown): v is PageKey =>
  typeof v === 'object' &&
  v !== null &&
  typeof (v as PageKey).i === 'string' &&
  typeof (v as PageKey).h === 'string' &&
  !Number.isNaN(Date.parse((v as PageKey).i));

/**
 * Imports signed bundles, all or nothing: the archive is read under hard limits, its signature
 * checked against the tenant's trust store before any other entry is expanded, every hash and path
 * checked, then every DAG is validated and published in ONE transaction with the bundle record and
 * its files. Any failure leaves nothing behind. Importing the same bundle again changes nothing.
 */
@Injectable()
export class BundlesService {
  private readonly limits: BundleLimits;

  constructor(
    private readonly db: Database,
    private readonly repo: BundlesRepository,
    private readonly trust: TrustService,
    private readonly dags: DagsService,
    @Optional() @Inject(BUNDLE_LIMITS) limits?: Partial<BundleLimits>,
  ) {
    this.limits = { ...DEFAULT_BUNDLE_LIMITS, ...limits };
  }

  async import(tenantId: string, actor: string, archive: Uint8Array, signature: string): Promise<ImportedBundleDto> {
    let signer: VerifiedSigner | undefined;
    const read = await readBundle(archive, {
      limits: this.limits,
      onManifest: async (bytes, manifest) => {
        signer = await this.trust.verifyDetached(tenantId, bytes, signature, 'BUNDLE');
        if (signer.owner !== manifest.owner) {
          throw new BundleError(
            'BUNDLE_OWNER_MISMATCH',
            `the manifest owner "${manifest.owner}" is not the owner of key ${signer.kid} ("${signer.owner}")`,
            422,
          );
        }
      },
    });
    const by = signer!;
    const scripts = new Map(read.manifest.scripts.map((p) => [p, read.files.get(p)!] as const));
    const definitions = read.manifest.dags.map((path) => {
      const parsed = parseDagFile(path, read.files.get(path)!);
      return { path, ...parsed, raw: inlineScriptRefs(path, parsed.raw, scripts) };
    });
    try {
      return await this.db.withTenant(tenantId, async (tx) => {
        // By name@version: this also sees a concurrent import of the same bundle committed meanwhile.
        const clash = await this.repo.findByNameVersion(tx, read.manifest.name, read.manifest.version);
        if (clash?.bundleHash === read.bundleHash) return { ...(await this.toDto(tx, clash)), imported: false };
        if (clash) {
          throw new BundleError(
            'BUNDLE_VERSION_CONFLICT',
            `${read.manifest.name}@${read.manifest.version} is already imported with other content (bundle ${clash.bundleHash}); publish a new version`,
            409,
          );
        }
        const dags: BundleDagRef[] = [];
        for (const d of definitions) {
          try {
            const published = await this.dags.publishIn(tx, actor, d.raw, {
              sourceFormat: d.format,
              signature: { kid: by.kid, signer: by.owner, alg: by.alg, source: 'bundle' },
              bundleHash: read.bundleHash,
            });
            dags.push({ path: d.path, dagId: published.dagId, version: published.version });
          } catch (e) {
            if (e instanceof DomainError && e.status < 500) {
              throw new BundleError('BUNDLE_DAG_INVALID', `${d.path}: ${e.message}`, 422, {
                path: d.path,
                code: e.code,
                details: e.details,
              });
            }
            throw e;
          }
        }
        const record = await this.repo.insert(
          tx,
          {
            bundleHash: read.bundleHash,
            manifest: read.manifest,
            signature: signature.trim(),
            kid: by.kid,
            dags,
            importedBy: actor,
          },
          filesOf(read),
        );
        return { ...(await this.toDto(tx, record)), imported: true };
      });
    } catch (e) {
      // A concurrent import of the same bundle won the insert: answer as a repeat.
      if (isUniqueViolation(e)) {
        const existing = await this.db.withTenant(tenantId, (tx) => this.repo.findByHash(tx, read.bundleHash));
        if (existing)
          return { ...(await this.db.withTenant(tenantId, (tx) => this.toDto(tx, existing))), imported: false };
        if ((e as { constraint?: string }).constraint === 'bundle_name_version_uq') {
          throw new BundleError(
            'BUNDLE_VERSION_CONFLICT',
            `${read.manifest.name}@${read.manifest.version} was just imported with other content; publish a new version`,
            409,
          );
        }
      }
      throw e;
    }
  }

  async get(tenantId: string, bundleHash: string): Promise<BundleDto> {
    return this.db.withTenant(tenantId, async (tx) => {
      const r = await this.repo.findByHash(tx, bundleHash);
      if (!r) throw notFound('bundle', 'BUNDLE_NOT_FOUND');
      return this.toDto(tx, r);
    });
  }

  async list(tenantId: string, q: { limit: number; pageToken?: string; name?: string }) {
    const after = decodePageToken(q.pageToken, isPageKey);
    return this.db.withTenant(tenantId, async (tx) => {
      const rows = await this.repo.list(tx, {
        limit: q.limit + 1,
        name: q.name,
        after: after && { importedAt: new Date(after.i), bundleHash: after.h },
      });
      const items = rows.slice(0, q.limit);
      const last = items[items.length - 1];
      return {
        items: items.map((r) => toDto(r)),
        nextPageToken:
          rows.length > q.limit ? encodePageToken({ i: last.importedAt.toISOString(), h: last.bundleHash }) : null,
      };
    });
  }

  /**
   * A script (or any file) shipped by an imported bundle, read from the database on every call so a
   * newly imported bundle is visible to every worker at once. Another tenant's bundle is not found.
   */
  async readScript(tenantId: string, ref: BundleRef, path: string): Promise<Buffer> {
    const content = await this.db.withTenant(tenantId, (tx) => this.repo.readFile(tx, ref, path));
    if (!content)
      throw notFound(
        `file ${path} in bundle ${'bundleHash' in ref ? ref.bundleHash : `${ref.name}@${ref.version}`}`,
        'BUNDLE_FILE_NOT_FOUND',
      );
    return content;
  }

  private async toDto(tx: TenantTx, r: BundleRecord): Promise<BundleDto> {
    return toDto(r, await this.repo.files(tx, r.bundleHash));
  }
}

function toDto(r: BundleRecord, files?: { path: string; sha256: string; size: number }[]): BundleDto {
  return {
    bundleHash: r.bundleHash,
    name: r.name,
    version: r.version,
    owner: r.owner,
    created: r.manifest.created,
    kid: r.kid,
    importedBy: r.importedBy,
    importedAt: r.importedAt.toISOString(),
    dags: r.dags,
    scripts: r.manifest.scripts,
    files: (files ?? r.manifest.files).map((f) => ({ path: f.path, sha256: f.sha256, size: f.size })),
  };
}

function parseDagFile(path: string, content: Buffer): { raw: unknown; format: 'json' | 'yaml' } {
  const text = content.toString('utf8');
  try {
    if (/\.json$/i.test(path)) return { raw: JSON.parse(text) as unknown, format: 'json' };
    return { raw: parseDagYaml(text), format: 'yaml' };
  } catch (e) {
    throw new BundleError('BUNDLE_DAG_INVALID', `${path}: ${e instanceof Error ? e.message : String(e)}`, 422, {
      path,
    });
  }
}

function filesOf(read: ReadBundle) {
  const kinds = new Map<string, BundleFileKind>();
  for (const p of read.manifest.dags) kinds.set(p, 'dag');
  for (const p of read.manifest.scripts) kinds.set(p, 'script');
  return read.manifest.files.map((f) => ({
    path: f.path,
    kind: kinds.get(f.path) ?? 'file',
    sha256: f.sha256,
    content: read.files.get(f.path)!,
  }));
}

function isUniqueViolation(e: unknown): boolean {
  return typeof e === 'object' && e !== null && (e as { code?: string }).code === '23505';
}
