import { createHash } from 'node:crypto';
import { z } from 'zod';
import { DomainError } from '../../core/errors/domain-error';

/**
 * Ordo bundle format, version 1 (`ordo-bundle/1`).
 *
 * A bundle is a gzip-compressed ustar archive:
 * - `manifest.json` is the FIRST entry: the JSON of {@link BundleManifest}.
 * - then every file the manifest lists, each exactly once, as a regular file (no directories are
 *   required; links, devices and FIFOs are refused), sorted by path when packed by `ordo bundle pack`.
 *
 * The signature is detached: a compact JWS `<protected>..<signature>` (RFC 7515 Appendix F) with
 * header `{alg: "EdDSA", kid, b64: false, crit: ["b64"]}` (RFC 7797) over the exact bytes of
 * `manifest.json`, Ed25519 only. It ships next to the archive as `<bundle>.tar.gz.sig`.
 *
 * The bundle hash (its identity) is the SHA-256, lowercase hex, of the `manifest.json` bytes. Since
 * the manifest pins every file by SHA-256 and size, the signature and the hash cover all content.
 */
export const BUNDLE_FORMAT = 'ordo-bundle/1';
export const MANIFEST_PATH = 'manifest.json';

/** Semantic Versioning 2.0.0. */
const SEMVER =
  /^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$/;
export const BUNDLE_NAME = /^[a-z0-9][a-z0-9._-]{0,127}$/;
const SHA256_HEX = /^[0-9a-f]{64}$/;
const DAG_FILE = /\.(json|ya?ml)$/i;
const MAX_PATH = 255;
export const MAX_MANIFEST_FILES = 1000;

/** Why a path inside a bundle is refused, or null when it is acceptable. */
export function pathProblem(
  p: string,
): { code: 'BUNDLE_PATH_TRAVERSAL' | 'BUNDLE_PATH_INVALID'; reason: string } | null {
  if (p.includes('\0')) return { code: 'BUNDLE_PATH_INVALID', reason: 'contains NUL' };
  if (p.includes('\\')) return { code: 'BUNDLE_PATH_TRAVERSAL', reason: 'contains a backslash' };
  if (p.startsWith('/') || /^[A-Za-z]:/.test(p)) return { code: 'BUNDLE_PATH_TRAVERSAL', reason: 'is absolute' };
  const segments = p.split('/');
  if (segments.includes('..')) return { code: 'BUNDLE_PATH_TRAVERSAL', reason: 'contains ..' };
  if (p.length === 0 || p.length > MAX_PATH)
    return { code: 'BUNDLE_PATH_INVALID', reason: `is empty or longer than ${MAX_PATH}` };

  if (/[\x00-\x1f\x7f]/.test(p)) return { code: 'BUNDLE_PATH_INVALID', reason: 'contains a control character' };
  if (segments.some((s) => s === '' || s === '.'))
    return { code: 'BUNDLE_PATH_INVALID', reason: 'has an empty or "." segment' };
  return null;
}

const bundlePath = z.string().superRefine((p, ctx) => {
  const problem = pathProblem(p);
  if (problem)
    ctx.addIssue({ code: 'custom', message: `path "${p}" ${problem.reason}`, params: { bundleCode: problem.code } });
  if (p === MANIFEST_PATH) ctx.addIssue({ code: 'custom', message: `${MANIFEST_PATH} is reserved` });
});

/** One file of a bundle, pinned by its SHA-256 (lowercase hex) and size in bytes. */
export const bundleFileEntry = z.strictObject({
  path: bundlePath,
  sha256: z.string().regex(SHA256_HEX, 'lowercase hex SHA-256'),
  size: z.number().int().min(0),
});

/** `manifest.json`: what a bundle is and everything it contains. */
export const bundleManifest = z
  .strictObject({
    format: z.literal(BUNDLE_FORMAT),
    /** Lowercase letters, digits, `.`, `_` and `-`; with `version`, unique per tenant. */
    name: z.string().regex(BUNDLE_NAME, 'lowercase letters, digits, . _ and -, at most 128'),
    /** Semantic version of this bundle. */
    version: z.string().max(128).regex(SEMVER, 'a semantic version like 1.2.0'),
    /** The signer; must equal the `owner` of the trusted key that signed the bundle. */
    owner: z.string().min(1).max(200),
    /** When the bundle was packed, UTC ISO 8601. */
    created: z.iso.datetime(),
    /** Every file shipped, manifest excluded, each path once. */
    files: z.array(bundleFileEntry).max(MAX_MANIFEST_FILES),
    /** Paths (listed in `files`) of DAG definitions, JSON or YAML, published on import. */
    dags: z.array(bundlePath).max(MAX_MANIFEST_FILES),
    /** Paths (listed in `files`) of scripts the `script` plugin may reference by `scriptRef`. */
    scripts: z.array(bundlePath).max(MAX_MANIFEST_FILES),
  })
  .superRefine((m, ctx) => {
    const paths = new Set<string>();
    m.files.forEach((f, i) => {
      if (paths.has(f.path))
        ctx.addIssue({ code: 'custom', path: ['files', i, 'path'], message: `${f.path} is listed twice` });
      paths.add(f.path);
    });
    for (const key of ['dags', 'scripts'] as const) {
      const seen = new Set<string>();
      m[key].forEach((p, i) => {
        if (!paths.has(p)) ctx.addIssue({ code: 'custom', path: [key, i], message: `${p} is not listed in files` });
        if (seen.has(p)) ctx.addIssue({ code: 'custom', path: [key, i], message: `${p} is listed twice` });
        if (key === 'dags' && !DAG_FILE.test(p))
          ctx.addIssue({ code: 'custom', path: [key, i], message: `${p} is not .json, .yaml or .yml` });
        seen.add(p);
      });
    }
  })
  .meta({ id: 'BundleManifest' });

/** The parsed `manifest.json` of a bundle (format `ordo-bundle/1`). */
export type BundleManifest = z.infer<typeof bundleManifest>;
export type BundleFileEntry = z.infer<typeof bundleFileEntry>;

/**
 * Hard limits applied while reading a bundle, before anything is stored. Defaults suit DAGs and
 * scripts; every one is checked on the stream, so a hostile archive stops at the first excess.
 */
export interface BundleLimits {
  /** The gzip archive as received. */
  maxCompressedBytes: number;
  /** The decompressed tar stream (headers and padding included). */
  maxUncompressedBytes: number;
  /** One file's content, manifest included. */
  maxFileBytes: number;
  /** Entries in the archive, manifest included. */
  maxEntries: number;
  /** Decompressed / compressed bytes; checked once `ratioFloorBytes` have been decompressed. */
  maxRatio: number;
  ratioFloorBytes: number;
}

export const DEFAULT_BUNDLE_LIMITS: BundleLimits = {
  maxCompressedBytes: 16 * 1024 * 1024,
  maxUncompressedBytes: 64 * 1024 * 1024,
  maxFileBytes: 8 * 1024 * 1024,
  maxEntries: MAX_MANIFEST_FILES + 1,
  maxRatio: 200,
  ratioFloorBytes: 4 * 1024 * 1024,
};

/** A refused bundle: stable code, HTTP status, nothing imported. */
export class BundleError extends DomainError {
  constructor(code: string, message: string, status = 400, details?: unknown) {
    super(code, message, status, details);
    this.name = 'BundleError';
  }
}

/** The bundle's identity: SHA-256 hex of the manifest bytes. */
export function bundleHashOf(manifestBytes: Uint8Array): string {
  return sha256Hex(manifestBytes);
}

export function sha256Hex(bytes: Uint8Array): string {
  return createHash('sha256').update(bytes).digest('hex');
}

/** Parses manifest bytes; refuses what is not an `ordo-bundle/1` manifest (path problems keep their own code). */
export function parseManifest(bytes: Uint8Array): BundleManifest {
  let raw: unknown;
  try {
    raw = JSON.parse(Buffer.from(bytes).toString('utf8'));
  } catch {
    throw new BundleError('BUNDLE_MANIFEST_INVALID', `${MANIFEST_PATH} is not JSON`);
  }
  const r = bundleManifest.safeParse(raw);
  if (r.success) return r.data;
  const issues = r.error.issues.map((i) => ({ path: i.path.map(String).join('.'), message: i.message }));
  const pathIssue = r.error.issues.find((i) => bundleCodeOf(i) !== undefined);
  if (pathIssue) throw new BundleError(bundleCodeOf(pathIssue)!, `manifest: ${pathIssue.message}`, 400, { issues });
  throw new BundleError('BUNDLE_MANIFEST_INVALID', `manifest: ${issues[0].path}: ${issues[0].message}`, 400, {
    issues,
  });
}

function bundleCodeOf(issue: z.core.$ZodIssue): string | undefined {
  return issue.code === 'custom' ? (issue.params as { bundleCode?: string } | undefined)?.bundleCode : undefined;
}

/** The canonical bytes of a manifest as `ordo bundle pack` writes them (fixed key order, 2-space JSON, trailing newline). */
export function manifestBytes(m: BundleManifest): Buffer {
  const ordered = {
    format: m.format,
    name: m.name,
    version: m.version,
    owner: m.owner,
    created: m.created,
    files: m.files.map((f) => ({ path: f.path, sha256: f.sha256, size: f.size })),
    dags: m.dags,
    scripts: m.scripts,
  };
  return Buffer.from(`${JSON.stringify(ordered, null, 2)}\n`, 'utf8');
}
