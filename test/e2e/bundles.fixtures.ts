import { PassThrough, Readable } from 'node:stream';
import zlib from 'node:zlib';
import tar, { type Header } from 'tar-stream';
import { BUNDLE_FORMAT, manifestBytes, sha256Hex, type BundleManifest } from '../../src/modules/bundles/bundle-format';
import { signDetached, type Ed25519PrivateJwk } from '../../src/modules/trust/detached-jws';

/** One raw tar entry for hand-crafted (possibly hostile) archives. */
export interface RawEntry {
  header: Partial<Header> & { name: string };
  content?: Buffer | string;
}

/** Builds a gzip tar from raw entries, exactly as given (no checks): for refusal tests. */
export async function rawTarball(entries: RawEntry[]): Promise<Buffer> {
  const pack = tar.pack();
  const chunks: Buffer[] = [];
  const done = (async () => {
    for await (const c of pack) chunks.push(c as Buffer);
  })();
  for (const e of entries) {
    const content = e.content === undefined ? undefined : Buffer.from(e.content);
    const header = {
      mode: 0o644,
      mtime: new Date(0),
      type: 'file' as const,
      ...e.header,
      size: e.header.size ?? content?.length ?? 0,
    };
    await new Promise<void>((resolve, reject) => {
      if (content !== undefined) pack.entry(header, content, (err) => (err ? reject(err) : resolve()));
      else pack.entry(header, (err) => (err ? reject(err) : resolve()));
    });
  }
  pack.finalize();
  await done;
  return zlib.gzipSync(Buffer.concat(chunks));
}

/** A manifest for the given files (content hashed here). */
export function manifestFor(
  files: Record<string, string | Buffer>,
  extra: Partial<BundleManifest> = {},
): BundleManifest {
  return {
    format: BUNDLE_FORMAT,
    name: 'fixture',
    version: '1.0.0',
    owner: 'acme',
    created: '2026-01-01T00:00:00.000Z',
    files: Object.entries(files)
      .sort(([a], [b]) => (a < b ? -1 : 1))
      .map(([path, c]) => ({ path, sha256: sha256Hex(Buffer.from(c)), size: Buffer.from(c).length })),
    dags: [],
    scripts: [],
    ...extra,
  };
}

/** A signed hostile archive: a valid signed manifest first, then `entries` as given. */
export async function signedRaw(
  manifest: BundleManifest,
  entries: RawEntry[],
  key: Ed25519PrivateJwk,
): Promise<{ bundle: Buffer; signature: string }> {
  const bytes = manifestBytes(manifest);
  const bundle = await rawTarball([{ header: { name: 'manifest.json' }, content: bytes }, ...entries]);
  return { bundle, signature: await signDetached(bytes, key) };
}

/**
 * A gzip bomb: a signed manifest listing `count` files of `size` zero bytes each (hashes correct,
 * so only the expansion gives it away), then those entries, compressed as a stream (the zeros are
 * never held in memory beyond one 1 MiB buffer). With `lie`, one entry of `count * size` bytes
 * stands behind a manifest claiming one small file.
 */
export async function gzipBomb(
  key: Ed25519PrivateJwk,
  opts: { count: number; size: number; lie?: boolean; name?: string; owner?: string },
): Promise<{ bundle: Buffer; signature: string; manifest: BundleManifest }> {
  const zeroHash = sha256Hex(Buffer.alloc(opts.size));
  const names = opts.lie
    ? ['zeros.bin']
    : Array.from({ length: opts.count }, (_, i) => `zeros/${String(i).padStart(5, '0')}.bin`);
  const manifest: BundleManifest = {
    ...manifestFor({}),
    ...(opts.name ? { name: opts.name } : {}),
    ...(opts.owner ? { owner: opts.owner } : {}),
    files: names.map((path) => ({ path, sha256: zeroHash, size: opts.size })),
  };
  const bytes = manifestBytes(manifest);
  const pack = tar.pack();
  const gz = zlib.createGzip({ level: 9 });
  const out: Buffer[] = [];
  const sink = new PassThrough();
  sink.on('data', (c: Buffer) => out.push(c));
  const finished = new Promise<void>((resolve, reject) => {
    sink.on('end', resolve);
    gz.on('error', reject);
  });
  Readable.from(pack as AsyncIterable<Buffer>)
    .pipe(gz)
    .pipe(sink);
  await new Promise<void>((resolve, reject) =>
    pack.entry({ name: 'manifest.json', size: bytes.length }, bytes, (e) => (e ? reject(e) : resolve())),
  );
  const zeros = Buffer.alloc(1024 * 1024);
  const entries = opts.lie
    ? [{ name: 'zeros.bin', size: opts.count * opts.size }]
    : names.map((name) => ({ name, size: opts.size }));
  for (const e of entries) {
    const entry = pack.entry({ name: e.name, size: e.size, mode: 0o644, type: 'file' });
    for (let written = 0; written < e.size; written += zeros.length) {
      const chunk = written + zeros.length <= e.size ? zeros : zeros.subarray(0, e.size - written);
      if (!entry.write(chunk)) await new Promise<void>((r) => entry.once('drain', () => r()));
    }
    (entry as unknown as { end(): void }).end();
  }
  pack.finalize();
  await finished;
  return { bundle: Buffer.concat(out), signature: await signDetached(bytes, key), manifest };
}
