import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { gzipBomb, manifestFor, rawTarball, signedRaw } from '../../../test/e2e/bundles.fixtures';
import { generateSigningKeyPair, type Ed25519PrivateJwk, type Ed25519PublicJwk } from '../trust/detached-jws';
import { BundleError, manifestBytes } from './bundle-format';
import { signBundle, verifyBundleOffline } from './bundle-offline';
import { packBundle } from './bundle-pack';
import { readBundle } from './bundle-reader';

async function codeOf(p: Promise<unknown>): Promise<string> {
  try {
    await p;
  } catch (e) {
    if (e instanceof BundleError || (e instanceof Error && 'code' in e)) return (e as BundleError).code;
    throw e;
  }
  throw new Error('expected a refusal');
}

describe('bundle pack, sign and offline verify', () => {
  let dir: string;
  let priv: Ed25519PrivateJwk;
  let pub: Ed25519PublicJwk;
  beforeAll(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ordo-bundle-src-'));
    fs.mkdirSync(path.join(dir, 'dags'));
    fs.mkdirSync(path.join(dir, 'scripts'));
    fs.writeFileSync(
      path.join(dir, 'dags', 'hello.json'),
      JSON.stringify({ id: 'hello', steps: [{ id: 'a', plugin: 'noop' }] }),
    );
    fs.writeFileSync(path.join(dir, 'scripts', 'x.js'), 'return 1;\n');
    fs.writeFileSync(path.join(dir, 'not-shipped.txt'), 'ignored');
    fs.writeFileSync(
      path.join(dir, 'bundle.json'),
      JSON.stringify({
        name: 'demo',
        version: '1.2.3',
        owner: 'acme',
        dags: ['dags/hello.json'],
        scripts: ['scripts/x.js'],
      }),
    );
    ({ privateJwk: priv, publicJwk: pub } = await generateSigningKeyPair('k1'));
  });
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

  it('packs byte-identical archives from the same source and created time', async () => {
    const created = new Date('2026-03-01T10:00:00Z');
    const a = await packBundle(dir, { created });
    const b = await packBundle(dir, { created });
    expect(a.tarball.equals(b.tarball)).toBe(true);
    expect(a.manifest.files.map((f) => f.path)).toEqual(['dags/hello.json', 'scripts/x.js']);
    expect(a.bundleHash).toMatch(/^[0-9a-f]{64}$/);
  });

  it('verifies a signed bundle offline and reads back every file', async () => {
    const packed = await packBundle(dir, { created: new Date('2026-03-01T10:00:00Z') });
    const { signature } = await signBundle(packed.tarball, priv);
    expect(signature).toMatch(/^[A-Za-z0-9_-]+\.\.[A-Za-z0-9_-]+$/);
    const v = await verifyBundleOffline(packed.tarball, signature, pub);
    expect(v.kid).toBe('k1');
    expect(v.bundleHash).toBe(packed.bundleHash);
    expect(v.files.get('scripts/x.js')?.toString()).toBe('return 1;\n');
  });

  it('refuses a signature by another key with the same kid', async () => {
    const packed = await packBundle(dir);
    const other = await generateSigningKeyPair('k1');
    const { signature } = await signBundle(packed.tarball, other.privateJwk);
    expect(await codeOf(verifyBundleOffline(packed.tarball, signature, pub))).toBe('BUNDLE_SIGNATURE_INVALID');
  });

  it('refuses a tampered manifest', async () => {
    const m = manifestFor({ 'a.txt': 'A' });
    const { signature } = await signedRaw(m, [{ header: { name: 'a.txt' }, content: 'A' }], priv);
    const tampered = await rawTarball([
      { header: { name: 'manifest.json' }, content: manifestBytes({ ...m, owner: 'mallory' }) },
      { header: { name: 'a.txt' }, content: 'A' },
    ]);
    expect(await codeOf(verifyBundleOffline(tampered, signature, pub))).toBe('BUNDLE_SIGNATURE_INVALID');
  });
});

describe('bundle reader refusals', () => {
  let key: Ed25519PrivateJwk;
  beforeAll(async () => {
    key = (await generateSigningKeyPair('k')).privateJwk;
  });
  const m = manifestFor({ 'a.txt': 'A' });
  const ok = { header: { name: 'a.txt' }, content: 'A' };
  const refuse = async (entries: Parameters<typeof signedRaw>[1], manifest = m) =>
    codeOf(readBundle((await signedRaw(manifest, entries, key)).bundle));

  it('accepts the well-formed archive the refusals are built from', async () => {
    const r = await readBundle((await signedRaw(m, [ok], key)).bundle);
    expect(r.files.get('a.txt')?.toString()).toBe('A');
  });
  it('refuses ../ paths', async () =>
    expect(await refuse([ok, { header: { name: '../x' }, content: 'x' }])).toBe('BUNDLE_PATH_TRAVERSAL'));
  it('refuses nested ../ paths', async () =>
    expect(await refuse([ok, { header: { name: 'a/../../x' }, content: 'x' }])).toBe('BUNDLE_PATH_TRAVERSAL'));
  it('refuses absolute paths', async () =>
    expect(await refuse([ok, { header: { name: '/etc/x' }, content: 'x' }])).toBe('BUNDLE_PATH_TRAVERSAL'));
  it('refuses backslashes', async () =>
    expect(await refuse([ok, { header: { name: '..\\x' }, content: 'x' }])).toBe('BUNDLE_PATH_TRAVERSAL'));
  it('refuses NUL in a pax path', async () =>
    expect(await refuse([ok, { header: { name: 'a.txt', pax: { path: 'a\u0000b' } }, content: 'x' }])).toMatch(
      /BUNDLE_PATH_(INVALID|TRAVERSAL)/,
    ));
  it('refuses symbolic links', async () =>
    expect(await refuse([{ header: { name: 'a.txt', type: 'symlink', linkname: '/etc/passwd' } }])).toBe(
      'BUNDLE_LINK',
    ));
  it('refuses hard links', async () =>
    expect(await refuse([ok, { header: { name: 'b.txt', type: 'link', linkname: 'a.txt' } }])).toBe('BUNDLE_LINK'));
  it('refuses character devices', async () =>
    expect(await refuse([{ header: { name: 'a.txt', type: 'character-device', devmajor: 1, devminor: 3 } }])).toBe(
      'BUNDLE_SPECIAL_FILE',
    ));
  it('refuses FIFOs', async () =>
    expect(await refuse([{ header: { name: 'a.txt', type: 'fifo' } }])).toBe('BUNDLE_SPECIAL_FILE'));
  it('refuses duplicate entries', async () => expect(await refuse([ok, ok])).toBe('BUNDLE_DUPLICATE_ENTRY'));
  it('refuses a second manifest', async () =>
    expect(await refuse([ok, { header: { name: 'manifest.json' }, content: manifestBytes(m) }])).toBe(
      'BUNDLE_DUPLICATE_ENTRY',
    ));
  it('refuses files the manifest does not list', async () =>
    expect(await refuse([ok, { header: { name: 'b.txt' }, content: 'B' }])).toBe('BUNDLE_UNLISTED_FILE'));
  it('refuses listed files that are missing', async () => expect(await refuse([])).toBe('BUNDLE_MISSING_FILE'));
  it('refuses content whose hash differs from the manifest', async () =>
    expect(await refuse([{ header: { name: 'a.txt' }, content: 'B' }])).toBe('BUNDLE_HASH_MISMATCH'));
  it('refuses content whose size differs from the manifest', async () =>
    expect(await refuse([{ header: { name: 'a.txt' }, content: 'AA' }])).toBe('BUNDLE_HASH_MISMATCH'));
  it('refuses an archive whose first entry is not the manifest', async () =>
    expect(
      await codeOf(
        readBundle(await rawTarball([ok, { header: { name: 'manifest.json' }, content: manifestBytes(m) }])),
      ),
    ).toBe('BUNDLE_MANIFEST_MISSING'));
  it('refuses a manifest that lists a traversal path', async () =>
    expect(await refuse([], { ...m, files: [{ path: '../x', sha256: 'a'.repeat(64), size: 1 }] })).toBe(
      'BUNDLE_PATH_TRAVERSAL',
    ));
  it('refuses a manifest with unknown fields', async () =>
    expect(
      await codeOf(
        readBundle(
          await rawTarball([{ header: { name: 'manifest.json' }, content: JSON.stringify({ ...m, extra: 1 }) }, ok]),
        ),
      ),
    ).toBe('BUNDLE_MANIFEST_INVALID'));
  it('refuses what is not gzip', async () =>
    expect(await codeOf(readBundle(Buffer.from('plain text')))).toBe('BUNDLE_MALFORMED'));
  it('refuses 10k tiny files', async () => {
    // The manifest lists the first 1000 (its maximum), so entries are refused by count, not by listing.
    const many = Array.from({ length: 10_000 }, (_, i) => ({ header: { name: `f${i}` }, content: 'x' }));
    const listed = manifestFor(Object.fromEntries(many.slice(0, 1000).map((e) => [e.header.name, 'x'])));
    expect(await refuse(many, listed)).toBe('BUNDLE_TOO_MANY_FILES');
  });
  it('refuses a file larger than the per-file limit', async () => {
    const big = Buffer.alloc(2048, 1);
    const mm = manifestFor({ 'big.bin': big });
    expect(
      await codeOf(
        readBundle((await signedRaw(mm, [{ header: { name: 'big.bin' }, content: big }], key)).bundle, {
          limits: { maxFileBytes: 1024 },
        }),
      ),
    ).toBe('BUNDLE_TOO_LARGE');
  });
  it('refuses an archive over the compressed size limit', async () => {
    const { bundle } = await signedRaw(m, [ok], key);
    expect(await codeOf(readBundle(bundle, { limits: { maxCompressedBytes: 64 } }))).toBe('BUNDLE_TOO_LARGE');
  });
  it('refuses a 1 GB-of-zeros gzip bomb whose files are all listed with correct hashes', async () => {
    const { bundle } = await gzipBomb(key, { count: 128, size: 8 * 1024 * 1024 });
    expect(bundle.length).toBeLessThan(2 * 1024 * 1024);
    expect(await codeOf(readBundle(bundle))).toBe('BUNDLE_BOMB');
  });
  it('refuses a 1 GB entry behind a manifest claiming a small file before expanding it', async () => {
    const { bundle } = await gzipBomb(key, { count: 1024, size: 1024 * 1024, lie: true });
    expect(await codeOf(readBundle(bundle))).toBe('BUNDLE_TOO_LARGE');
  });
});
