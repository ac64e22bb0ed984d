import path from 'node:path';
import pg from 'pg';
import { manifestBytes } from '../../src/modules/bundles/bundle-format';
import { signBundle } from '../../src/modules/bundles/bundle-offline';
import { packBundle } from '../../src/modules/bundles/bundle-pack';
import { BundlesService } from '../../src/modules/bundles/bundles.service';
import {
  generateSigningKeyPair,
  signDetached,
  type Ed25519PrivateJwk,
  type Ed25519PublicJwk,
} from '../../src/modules/trust/detached-jws';
import { startTestApp, type TestApp } from '../support/test-app';
import { gzipBomb, manifestFor, rawTarball, signedRaw, type RawEntry } from './bundles.fixtures';

const EXAMPLE_DIR = path.join(__dirname, '../../bundles/example');
const CREATED = new Date('2026-01-02T03:04:05Z');

describe('signed bundle import', () => {
  let app: TestApp;
  let owner: pg.Client;
  let admin: { token: string; tenantId: string };
  let key: { privateJwk: Ed25519PrivateJwk; publicJwk: Ed25519PublicJwk };

  const trust = (k: Ed25519PublicJwk, opts: { owner?: string; expiresAt?: string } = {}, as = admin) =>
    app.request('POST', '/api/v1/trust/keys', {
      as,
      body: {
        kid: k.kid,
        owner: opts.owner ?? 'acme',
        publicJwk: k,
        ...(opts.expiresAt ? { expiresAt: opts.expiresAt } : {}),
      },
    });
  const importBundle = (bundle: Buffer, signature: string, as = admin) =>
    app.request('POST', '/api/v1/bundles', { as, body: { bundle: bundle.toString('base64'), signature } });

  /** Rows a bundle import writes, across every tenant (the owner connection bypasses RLS). */
  const counts = async () => {
    const r = await owner.query<{ v: number; b: number; f: number; bl: number; d: number }>(
      `select (select count(*)::int from dag_version) v, (select count(*)::int from bundle) b,
              (select count(*)::int from bundle_file) f, (select count(*)::int from bundle_blob) bl, (select count(*)::int from dag) d`,
    );
    return r.rows[0];
  };

  beforeAll(async () => {
    app = await startTestApp({ ORDO_BODY_LIMIT_BYTES: String(8 * 1024 * 1024) });
    owner = new pg.Client({ connectionString: app.testDb.ownerUrl });
    await owner.connect();
    admin = { token: app.adminToken, tenantId: app.tenantId };
    key = await generateSigningKeyPair('acme-2026');
    expect((await trust(key.publicJwk)).status).toBe(201);
  });
  afterAll(async () => {
    await owner?.end();
    await app?.close();
  });

  it('walks through the example: pack, sign, trust the key, import, and the DAGs are published with signer and hash', async () => {
    const example = await generateSigningKeyPair('example-walkthrough');
    expect((await trust(example.publicJwk, { owner: 'example-publisher' })).status).toBe(201);
    const packed = await packBundle(EXAMPLE_DIR, { created: CREATED });
    const { signature } = await signBundle(packed.tarball, example.privateJwk);
    const r = await importBundle(packed.tarball, signature);
    expect(r.status).toBe(201);
    expect(r.body).toMatchObject({
      bundleHash: packed.bundleHash,
      name: 'example',
      version: '1.0.0',
      owner: 'example-publisher',
      kid: 'example-walkthrough',
      imported: true,
    });
    expect(r.body.dags.map((d: { dagId: string }) => d.dagId).sort()).toEqual(['example-greet', 'example-hello']);

    const dag = await app.request('GET', '/api/v1/dags/example-hello', { as: admin });
    expect(dag.status).toBe(200);
    expect(dag.body.bundleHash).toBe(packed.bundleHash);
    expect(dag.body.signature).toEqual({
      kid: 'example-walkthrough',
      signer: 'example-publisher',
      alg: 'EdDSA',
      source: 'bundle',
    });

    const script = await app.ordo.app
      .get(BundlesService, { strict: false })
      .readScript(app.tenantId, { name: 'example', version: '1.0.0' }, 'scripts/greet.js');
    expect(script.toString()).toContain('Hello, ');

    const got = await app.request('GET', `/api/v1/bundles/${packed.bundleHash}`, { as: admin });
    expect(got.status).toBe(200);
    expect(got.body.files.map((f: { path: string }) => f.path)).toEqual([
      'README.md',
      'dags/greet.yaml',
      'dags/hello.json',
      'scripts/greet.js',
    ]);
    const list = await app.request('GET', '/api/v1/bundles?name=example', { as: admin });
    expect(list.body.items.map((b: { bundleHash: string }) => b.bundleHash)).toEqual([packed.bundleHash]);
  });

  it('imports the same bundle twice idempotently: 200, same record, nothing written', async () => {
    const files = { 'dags/a.json': JSON.stringify({ id: 'idem-a', steps: [{ id: 's', plugin: 'noop' }] }) };
    const m = manifestFor(files, { name: 'idem', dags: ['dags/a.json'] });
    const b = await signedRaw(
      m,
      Object.entries(files).map(([name, content]) => ({ header: { name }, content })),
      key.privateJwk,
    );
    const first = await importBundle(b.bundle, b.signature);
    expect(first.status).toBe(201);
    const before = await counts();
    const again = await importBundle(b.bundle, b.signature);
    expect(again.status).toBe(200);
    expect(again.body.imported).toBe(false);
    expect({ ...again.body, imported: true }).toEqual(first.body);
    expect(await counts()).toEqual(before);
  });

  it('imports one bundle sent five times at once exactly once', async () => {
    const files = { 'dags/c.json': JSON.stringify({ id: 'concurrent-c', steps: [{ id: 's', plugin: 'noop' }] }) };
    const m = manifestFor(files, { name: 'concurrent', dags: ['dags/c.json'] });
    const b = await signedRaw(
      m,
      Object.entries(files).map(([name, content]) => ({ header: { name }, content })),
      key.privateJwk,
    );
    const before = await counts();
    const rs = await Promise.all(Array.from({ length: 5 }, () => importBundle(b.bundle, b.signature)));
    expect(rs.map((r) => r.status).sort()).toEqual([200, 200, 200, 200, 201]);
    expect(new Set(rs.map((r) => r.body.bundleHash)).size).toBe(1);
    const after = await counts();
    expect({ v: after.v - before.v, b: after.b - before.b, f: after.f - before.f }).toEqual({ v: 1, b: 1, f: 1 });
  });

  it('satisfies requireSignedDags: a bundle publishes while unsigned API publishes are refused', async () => {
    expect((await app.request('PUT', '/api/v1/policy', { as: admin, body: { requireSignedDags: true } })).status).toBe(
      200,
    );
    try {
      const files = { 'p.json': JSON.stringify({ id: 'policy-p', steps: [{ id: 's', plugin: 'noop' }] }) };
      const m = manifestFor(files, { name: 'policy', dags: ['p.json'] });
      const b = await signedRaw(m, [{ header: { name: 'p.json' }, content: files['p.json'] }], key.privateJwk);
      expect((await importBundle(b.bundle, b.signature)).status).toBe(201);
      const unsigned = await app.request('POST', '/api/v1/dags', {
        as: admin,
        body: { id: 'policy-q', steps: [{ id: 's', plugin: 'noop' }] },
      });
      expect(unsigned.status).toBe(403);
      expect(unsigned.body.error.code).toBe('DAG_SIGNATURE_REQUIRED');
    } finally {
      await app.request('PUT', '/api/v1/policy', { as: admin, body: { requireSignedDags: false } });
    }
  });

  it('refuses another version of name@version with 409 BUNDLE_VERSION_CONFLICT', async () => {
    const m1 = manifestFor({ 'x.txt': '1' }, { name: 'clash' });
    const m2 = manifestFor({ 'x.txt': '2' }, { name: 'clash' });
    const a = await signedRaw(m1, [{ header: { name: 'x.txt' }, content: '1' }], key.privateJwk);
    const b = await signedRaw(m2, [{ header: { name: 'x.txt' }, content: '2' }], key.privateJwk);
    expect((await importBundle(a.bundle, a.signature)).status).toBe(201);
    const before = await counts();
    const r = await importBundle(b.bundle, b.signature);
    expect(r.status).toBe(409);
    expect(r.body.error.code).toBe('BUNDLE_VERSION_CONFLICT');
    expect(await counts()).toEqual(before);
  });

  it('publishes nothing when the third of three DAGs is invalid (all or nothing)', async () => {
    const ok = (id: string) => JSON.stringify({ id, steps: [{ id: 's', plugin: 'noop' }] });
    const files = {
      'd1.json': ok('aon-1'),
      'd2.json': ok('aon-2'),
      'd3.json': JSON.stringify({ id: 'aon-3', steps: [{ id: 's', plugin: 'no-such-plugin' }] }),
    };
    const m = manifestFor(files, { name: 'aon', dags: ['d1.json', 'd2.json', 'd3.json'] });
    const b = await signedRaw(
      m,
      Object.entries(files).map(([name, content]) => ({ header: { name }, content })),
      key.privateJwk,
    );
    const before = await counts();
    const r = await importBundle(b.bundle, b.signature);
    expect(r.status).toBe(422);
    expect(r.body.error.code).toBe('BUNDLE_DAG_INVALID');
    expect(r.body.error.message).toContain('d3.json');
    expect(await counts()).toEqual(before);
    expect((await app.request('GET', '/api/v1/dags/aon-1', { as: admin })).status).toBe(404);
  });

  describe('refusals: each answers its code and writes nothing', () => {
    const m = manifestFor({ 'a.txt': 'A' }, { name: 'hostile' });
    const ok: RawEntry = { header: { name: 'a.txt' }, content: 'A' };
    const cases: [string, () => Promise<{ bundle: Buffer; signature: string }>, number, string][] = [
      [
        '../ path',
        () => signedRaw(m, [ok, { header: { name: '../x' }, content: 'x' }], key.privateJwk),
        400,
        'BUNDLE_PATH_TRAVERSAL',
      ],
      [
        'absolute path',
        () => signedRaw(m, [ok, { header: { name: '/etc/x' }, content: 'x' }], key.privateJwk),
        400,
        'BUNDLE_PATH_TRAVERSAL',
      ],
      [
        'backslash path',
        () => signedRaw(m, [ok, { header: { name: 'a\\..\\..\\x' }, content: 'x' }], key.privateJwk),
        400,
        'BUNDLE_PATH_TRAVERSAL',
      ],
      [
        'symlink',
        () => signedRaw(m, [{ header: { name: 'a.txt', type: 'symlink', linkname: '/etc/passwd' } }], key.privateJwk),
        400,
        'BUNDLE_LINK',
      ],
      [
        'hard link',
        () => signedRaw(m, [ok, { header: { name: 'b.txt', type: 'link', linkname: 'a.txt' } }], key.privateJwk),
        400,
        'BUNDLE_LINK',
      ],
      [
        'character device',
        () =>
          signedRaw(
            m,
            [{ header: { name: 'a.txt', type: 'character-device', devmajor: 1, devminor: 3 } }],
            key.privateJwk,
          ),
        400,
        'BUNDLE_SPECIAL_FILE',
      ],
      ['duplicate entry', () => signedRaw(m, [ok, ok], key.privateJwk), 400, 'BUNDLE_DUPLICATE_ENTRY'],
      [
        'unlisted file',
        () => signedRaw(m, [ok, { header: { name: 'extra.txt' }, content: 'x' }], key.privateJwk),
        400,
        'BUNDLE_UNLISTED_FILE',
      ],
      ['missing file', () => signedRaw(m, [], key.privateJwk), 400, 'BUNDLE_MISSING_FILE'],
      [
        'bad hash',
        () => signedRaw(m, [{ header: { name: 'a.txt' }, content: 'B' }], key.privateJwk),
        400,
        'BUNDLE_HASH_MISMATCH',
      ],
      [
        '10k tiny files',
        () => {
          const many = Array.from({ length: 10_000 }, (_, i) => ({ header: { name: `f${i}` }, content: 'x' }));
          return signedRaw(
            manifestFor(Object.fromEntries(many.slice(0, 1000).map((e) => [e.header.name, 'x'])), { name: 'many' }),
            many,
            key.privateJwk,
          );
        },
        413,
        'BUNDLE_TOO_MANY_FILES',
      ],
      [
        '1 GB-of-zeros gzip bomb',
        () => gzipBomb(key.privateJwk, { count: 128, size: 8 * 1024 * 1024, owner: 'acme' }),
        413,
        'BUNDLE_BOMB',
      ],
      [
        'not an archive',
        async () => ({ bundle: Buffer.from('hello'), signature: await signDetached(Buffer.from('x'), key.privateJwk) }),
        400,
        'BUNDLE_MALFORMED',
      ],
      [
        'tampered manifest',
        async () => {
          const signed = await signedRaw(m, [ok], key.privateJwk);
          const bundle = await rawTarball([
            { header: { name: 'manifest.json' }, content: manifestBytes({ ...m, version: '9.9.9' }) },
            ok,
          ]);
          return { bundle, signature: signed.signature };
        },
        422,
        'BUNDLE_SIGNATURE_INVALID',
      ],
      [
        'key not in the trust store',
        async () => signedRaw(m, [ok], (await generateSigningKeyPair('stranger')).privateJwk),
        422,
        'BUNDLE_KEY_UNTRUSTED',
      ],
      [
        'another key under a trusted kid',
        async () => signedRaw(m, [ok], (await generateSigningKeyPair('acme-2026')).privateJwk),
        422,
        'BUNDLE_SIGNATURE_INVALID',
      ],
      [
        'manifest owner other than the key owner',
        () => signedRaw({ ...m, owner: 'mallory' }, [ok], key.privateJwk),
        422,
        'BUNDLE_OWNER_MISMATCH',
      ],
    ];

    it.each(cases)('%s', async (_name, build, status, code) => {
      const before = await counts();
      const b = await build();
      const r = await importBundle(b.bundle, b.signature);
      expect({ status: r.status, code: r.body?.error?.code }).toEqual({ status, code });
      expect(await counts()).toEqual(before);
    });

    it('refuses a bundle signed by a revoked key', async () => {
      const k = await generateSigningKeyPair('to-revoke');
      expect((await trust(k.publicJwk)).status).toBe(201);
      const b = await signedRaw(m, [ok], k.privateJwk);
      expect((await app.request('POST', '/api/v1/trust/keys/to-revoke/revoke', { as: admin })).status).toBe(200);
      const before = await counts();
      const r = await importBundle(b.bundle, b.signature);
      expect({ status: r.status, code: r.body.error.code }).toEqual({ status: 422, code: 'BUNDLE_KEY_REVOKED' });
      expect(await counts()).toEqual(before);
    });

    it('refuses a bundle signed by an expired key', async () => {
      const k = await generateSigningKeyPair('expired');
      expect((await trust(k.publicJwk, { expiresAt: '2020-01-01T00:00:00Z' })).status).toBe(201);
      const b = await signedRaw(m, [ok], k.privateJwk);
      const before = await counts();
      const r = await importBundle(b.bundle, b.signature);
      expect({ status: r.status, code: r.body.error.code }).toEqual({ status: 422, code: 'BUNDLE_KEY_EXPIRED' });
      expect(await counts()).toEqual(before);
    });

    it('refuses a body that is not base64 with 400 VALIDATION_FAILED', async () => {
      const r = await app.request('POST', '/api/v1/bundles', { as: admin, body: { bundle: '***', signature: 'x..y' } });
      expect(r.status).toBe(400);
      expect(r.body.error.code).toBe('VALIDATION_FAILED');
    });

    it('refuses an import with a read-only token (403)', async () => {
      const b = await signedRaw(m, [ok], key.privateJwk);
      const reader = await app.token(app.tenantId, ['orchestrator:read']);
      const r = await importBundle(b.bundle, b.signature, { token: reader, tenantId: app.tenantId });
      expect(r.status).toBe(403);
    });
  });

  describe('across tenants', () => {
    it("tenant B cannot read tenant A's bundle (404) nor see it listed", async () => {
      const b = await app.tenant('bundles-b');
      const files = { 'x.txt': 'x' };
      const s = await signedRaw(
        manifestFor(files, { name: 'tenant-a-only' }),
        [{ header: { name: 'x.txt' }, content: 'x' }],
        key.privateJwk,
      );
      const imported = await importBundle(s.bundle, s.signature);
      expect(imported.status).toBe(201);
      const get = await app.request('GET', `/api/v1/bundles/${imported.body.bundleHash}`, { as: b });
      expect(get.status).toBe(404);
      expect(get.body.error.code).toBe('BUNDLE_NOT_FOUND');
      const list = await app.request('GET', '/api/v1/bundles', { as: b });
      expect(list.body.items).toEqual([]);
      await expect(
        app.ordo.app
          .get(BundlesService, { strict: false })
          .readScript('bundles-b', { bundleHash: imported.body.bundleHash }, 'x.txt'),
      ).rejects.toMatchObject({ code: 'BUNDLE_FILE_NOT_FOUND' });
    });

    it('refuses for tenant B a bundle signed by a key only tenant A trusts (BUNDLE_KEY_UNTRUSTED)', async () => {
      const b = await app.tenant('bundles-b2');
      const s = await signedRaw(
        manifestFor({ 'x.txt': 'x' }, { name: 'for-b' }),
        [{ header: { name: 'x.txt' }, content: 'x' }],
        key.privateJwk,
      );
      const before = await counts();
      const r = await importBundle(s.bundle, s.signature, b);
      expect({ status: r.status, code: r.body.error.code }).toEqual({ status: 422, code: 'BUNDLE_KEY_UNTRUSTED' });
      expect(await counts()).toEqual(before);
    });
  });
});
