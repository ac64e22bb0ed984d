import fs from 'node:fs/promises';
import path from 'node:path';
import zlib from 'node:zlib';
import tar from 'tar-stream';
import { z } from 'zod';
import {
  BUNDLE_FORMAT,
  BundleError,
  bundleHashOf,
  MANIFEST_PATH,
  manifestBytes as encodeManifest,
  parseManifest,
  pathProblem,
  sha256Hex,
  type BundleManifest,
} from './bundle-format';

export const BUNDLE_SOURCE_FILE = 'bundle.json';

/**
 * `bundle.json`, the source description of a bundle: identity plus the files it ships, as paths
 * relative to the source directory. `dags` and `scripts` are shipped and typed; `files` ships
 * anything else (documentation, data). Nothing in the directory is shipped unless listed here.
 */
export const bundleSource = z.strictObject({
  name: z.string(),
  version: z.string(),
  owner: z.string(),
  dags: z.array(z.string()).default([]),
  scripts: z.array(z.string()).default([]),
  files: z.array(z.string()).default([]),
});
export type BundleSource = z.infer<typeof bundleSource>;

export interface PackedBundle {
  tarball: Buffer;
  manifest: BundleManifest;
  manifestBytes: Buffer;
  bundleHash: string;
}

/** Fixed header fields: packing the same source with the same `created` is byte-identical. */
const FILE_MODE = 0o644;

/**
 * Packs a source directory (with `bundle.json`) into a bundle archive. Deterministic: manifest
 * first, then files sorted by path, with fixed mode, owner and mtime (the manifest's `created`),
 * and a gzip stream without a timestamp. `created` defaults to SOURCE_DATE_EPOCH of `env` (the
 * caller's environment: the CLI passes its own) when set, else now.
 */
export async function packBundle(
  dir: string,
  opts: { created?: Date; env?: { SOURCE_DATE_EPOCH?: string } } = {},
): Promise<PackedBundle> {
  const sourceFile = path.join(dir, BUNDLE_SOURCE_FILE);
  let raw: unknown;
  try {
    raw = JSON.parse(await fs.readFile(sourceFile, 'utf8'));
  } catch (e) {
    throw new BundleError('BUNDLE_SOURCE_INVALID', `cannot read ${sourceFile}: ${(e as Error).message}`);
  }
  const src = bundleSource.safeParse(raw);
  if (!src.success) {
    const i = src.error.issues[0];
    throw new BundleError('BUNDLE_SOURCE_INVALID', `${BUNDLE_SOURCE_FILE}: ${i.path.join('.')}: ${i.message}`);
  }
  const paths = [...new Set([...src.data.dags, ...src.data.scripts, ...src.data.files])].sort(byBytes);
  const root = await fs.realpath(dir);
  const contents = new Map<string, Buffer>();
  for (const p of paths) {
    const problem = pathProblem(p);
    if (problem) throw new BundleError(problem.code, `${BUNDLE_SOURCE_FILE}: path "${p}" ${problem.reason}`);
    const full = path.join(root, ...p.split('/'));
    const st = await fs.lstat(full).catch(() => undefined);
    if (!st) throw new BundleError('BUNDLE_SOURCE_INVALID', `${p} does not exist in ${dir}`);
    if (!st.isFile())
      throw new BundleError(
        'BUNDLE_SOURCE_INVALID',
        `${p} is not a regular file (links and directories are not shipped)`,
      );
    contents.set(p, await fs.readFile(full));
  }
  const created = opts.created ?? createdFromEnv(opts.env ?? {}) ?? new Date();
  created.setUTCMilliseconds(0);
  const manifest: BundleManifest = {
    format: BUNDLE_FORMAT,
    name: src.data.name,
    version: src.data.version,
    owner: src.data.owner,
    created: created.toISOString(),
    files: paths.map((p) => ({ path: p, sha256: sha256Hex(contents.get(p)!), size: contents.get(p)!.length })),
    dags: src.data.dags,
    scripts: src.data.scripts,
  };
  const bytes = encodeManifest(manifest);
  // The manifest goes through the same checks as on import, so a bad source fails here, not later.
  parseManifest(bytes);
  const tarball = await writeArchive(
    [[MANIFEST_PATH, bytes], ...paths.map((p) => [p, contents.get(p)!] as [string, Buffer])],
    created,
  );
  return { tarball, manifest, manifestBytes: bytes, bundleHash: bundleHashOf(bytes) };
}

/** Writes entries (in the given order) as a deterministic gzip-compressed ustar archive. */
export async function writeArchive(entries: [string, Buffer][], mtime: Date): Promise<Buffer> {
  const pack = tar.pack();
  const chunks: Buffer[] = [];
  const collected = (async () => {
    for await (const c of pack) chunks.push(c as Buffer);
  })();
  for (const [name, content] of entries) {
    await new Promise<void>((resolve, reject) => {
      pack.entry(
        { name, size: content.length, mode: FILE_MODE, uid: 0, gid: 0, uname: '', gname: '', mtime, type: 'file' },
        content,
        (err) => (err ? reject(err) : resolve()),
      );
    });
  }
  pack.finalize();
  await collected;
  return zlib.gzipSync(Buffer.concat(chunks), { level: 9 });
}

function createdFromEnv(env: { SOURCE_DATE_EPOCH?: string }): Date | undefined {
  const v = env.SOURCE_DATE_EPOCH;
  if (!v) return undefined;
  if (!/^\d+$/.test(v)) throw new BundleError('BUNDLE_SOURCE_INVALID', 'SOURCE_DATE_EPOCH must be a number of seconds');
  return new Date(Number(v) * 1000);
}

function byBytes(a: string, b: string): number {
  return Buffer.compare(Buffer.from(a), Buffer.from(b));
}
