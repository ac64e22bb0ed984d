import { Readable, Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import zlib from 'node:zlib';
import tar, { type ExtractEvents } from 'tar-stream';
import { DomainError } from '../../core/errors/domain-error';
import {
  BundleError,
  bundleHashOf,
  DEFAULT_BUNDLE_LIMITS,
  MANIFEST_PATH,
  parseManifest,
  pathProblem,
  sha256Hex,
  type BundleFileEntry,
  type BundleLimits,
  type BundleManifest,
} from './bundle-format';

type Entry = ExtractEvents['entry'][1];

const MAX_MANIFEST_BYTES = 1024 * 1024;
/** Compressed input is fed in slices so the ratio check sees how much input produced the output so far. */
const INPUT_SLICE = 16 * 1024;

/** A bundle whose structure, paths and hashes all check out, held in memory. */
export interface ReadBundle {
  manifest: BundleManifest;
  /** The exact bytes of manifest.json (what the signature covers). */
  manifestBytes: Buffer;
  bundleHash: string;
  /** Every listed file's content, by path. */
  files: Map<string, Buffer>;
}

export interface ReadBundleOptions {
  limits?: Partial<BundleLimits>;
  /**
   * Called with the manifest before any other entry is decompressed; throwing refuses the bundle.
   * Signature and trust checks go here, so an unsigned archive is never expanded.
   */
  onManifest?: (manifestBytes: Buffer, manifest: BundleManifest) => Promise<void>;
}

/**
 * Reads a bundle archive (gzip + tar) as a stream under hard limits, checking every entry as it
 * arrives: manifest first, no links, devices or FIFOs, safe paths only, no duplicates, only listed
 * files, sizes and SHA-256 as listed, and nothing listed missing. Throws a BundleError at the first
 * problem; nothing is written anywhere by reading.
 */
export async function readBundle(input: Uint8Array, opts: ReadBundleOptions = {}): Promise<ReadBundle> {
  const limits = { ...DEFAULT_BUNDLE_LIMITS, ...opts.limits };
  if (input.length > limits.maxCompressedBytes) {
    throw new BundleError(
      'BUNDLE_TOO_LARGE',
      `the bundle is ${input.length} bytes; at most ${limits.maxCompressedBytes} are accepted`,
      413,
    );
  }
  let failure: BundleError | undefined;
  const fail = (e: BundleError): BundleError => (failure ??= e);

  let produced = 0;
  const source = Readable.from(slices(Buffer.from(input.buffer, input.byteOffset, input.byteLength)), {
    highWaterMark: 1,
  });
  // bytesWritten counts the compressed bytes the engine has consumed so far, not those queued.
  const gunzip = zlib.createGunzip();
  const outMeter = new Transform({
    transform(chunk: Buffer, _enc, cb) {
      produced += chunk.length;
      if (produced >= limits.ratioFloorBytes && produced / Math.max(gunzip.bytesWritten, 1) > limits.maxRatio) {
        return cb(
          fail(
            new BundleError(
              'BUNDLE_BOMB',
              `the archive expands more than ${limits.maxRatio} times: refused as a decompression bomb`,
              413,
            ),
          ),
        );
      }
      if (produced > limits.maxUncompressedBytes) {
        return cb(
          fail(
            new BundleError('BUNDLE_TOO_LARGE', `the archive expands past ${limits.maxUncompressedBytes} bytes`, 413),
          ),
        );
      }
      cb(null, chunk);
    },
  });
  const extract = tar.extract();
  const piping = pipeline(source, gunzip, outMeter, extract).then(
    () => null,
    (e: unknown) => e,
  );

  let manifest: BundleManifest | undefined;
  let manifestRaw: Buffer | undefined;
  let listed = new Map<string, BundleFileEntry>();
  const files = new Map<string, Buffer>();
  let entries = 0;
  try {
    for await (const entry of extract) {
      const h = entry.header;
      entries++;
      if (entries > limits.maxEntries) {
        throw fail(
          new BundleError('BUNDLE_TOO_MANY_FILES', `the archive holds more than ${limits.maxEntries} entries`, 413),
        );
      }
      const name = h.type === 'directory' ? h.name.replace(/\/$/, '') : h.name;
      const problem = pathProblem(name);
      if (problem) throw fail(new BundleError(problem.code, `entry "${printable(h.name)}" ${problem.reason}`));
      if (h.type === 'symlink' || h.type === 'link') {
        throw fail(
          new BundleError(
            'BUNDLE_LINK',
            `entry "${name}" is a ${h.type === 'link' ? 'hard link' : 'symbolic link'}; links are refused`,
          ),
        );
      }
      if (h.type === 'directory') {
        await drain(entry);
        continue;
      }
      if (h.type !== 'file') {
        throw fail(
          new BundleError('BUNDLE_SPECIAL_FILE', `entry "${name}" is a ${h.type}; only regular files are accepted`),
        );
      }
      const size = h.size ?? 0;
      if (!manifest) {
        if (name !== MANIFEST_PATH)
          throw fail(
            new BundleError('BUNDLE_MANIFEST_MISSING', `the first entry must be ${MANIFEST_PATH}, found "${name}"`),
          );
        if (size > MAX_MANIFEST_BYTES)
          throw fail(new BundleError('BUNDLE_TOO_LARGE', `${MANIFEST_PATH} exceeds ${MAX_MANIFEST_BYTES} bytes`, 413));
        manifestRaw = await readEntry(entry, MAX_MANIFEST_BYTES);
        manifest = parseManifest(manifestRaw);
        listed = new Map(manifest.files.map((f) => [f.path, f]));
        if (opts.onManifest) await opts.onManifest(manifestRaw, manifest);
        continue;
      }
      if (name === MANIFEST_PATH || files.has(name))
        throw fail(new BundleError('BUNDLE_DUPLICATE_ENTRY', `entry "${name}" appears twice`));
      const expected = listed.get(name);
      if (!expected)
        throw fail(new BundleError('BUNDLE_UNLISTED_FILE', `entry "${name}" is not listed in the manifest`));
      if (size > limits.maxFileBytes) {
        throw fail(
          new BundleError(
            'BUNDLE_TOO_LARGE',
            `entry "${name}" is ${size} bytes; at most ${limits.maxFileBytes} per file`,
            413,
          ),
        );
      }
      if (size !== expected.size) {
        throw fail(
          new BundleError(
            'BUNDLE_HASH_MISMATCH',
            `entry "${name}" is ${size} bytes; the manifest says ${expected.size}`,
          ),
        );
      }
      const content = await readEntry(entry, limits.maxFileBytes);
      if (sha256Hex(content) !== expected.sha256) {
        throw fail(
          new BundleError('BUNDLE_HASH_MISMATCH', `entry "${name}" does not match its SHA-256 in the manifest`),
        );
      }
      files.set(name, content);
    }
  } catch (e) {
    extract.destroy();
    await piping;
    throw failure ?? asBundleError(e);
  }
  const streamError = await piping;
  if (failure) throw failure;
  if (streamError) throw asBundleError(streamError);
  if (!manifest || !manifestRaw)
    throw new BundleError('BUNDLE_MANIFEST_MISSING', `the archive has no ${MANIFEST_PATH}`);
  const missing = manifest.files.filter((f) => !files.has(f.path)).map((f) => f.path);
  if (missing.length > 0) {
    throw new BundleError(
      'BUNDLE_MISSING_FILE',
      `the manifest lists ${missing.length} file(s) the archive lacks: ${missing.slice(0, 5).join(', ')}`,
      400,
      { missing },
    );
  }
  return { manifest, manifestBytes: manifestRaw, bundleHash: bundleHashOf(manifestRaw), files };
}

function* slices(buf: Buffer): Generator<Buffer> {
  for (let i = 0; i < buf.length; i += INPUT_SLICE) yield buf.subarray(i, i + INPUT_SLICE);
}

async function readEntry(entry: Entry, max: number): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let n = 0;
  for await (const chunk of entry) {
    n += (chunk as Buffer).length;
    if (n > max) throw new BundleError('BUNDLE_TOO_LARGE', `entry "${entry.header.name}" exceeds ${max} bytes`, 413);
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks);
}

async function drain(entry: Entry): Promise<void> {
  for await (const _ of entry) {
    // directories carry no content; anything there is discarded
  }
}

function asBundleError(e: unknown): DomainError {
  if (e instanceof DomainError) return e;
  const msg = e instanceof Error ? e.message : String(e);
  return new BundleError('BUNDLE_MALFORMED', `not a gzip-compressed tar archive: ${msg}`);
}

function printable(s: string): string {
  return s.replace(/[\x00-\x1f\x7f]/g, '?').slice(0, 300);
}
