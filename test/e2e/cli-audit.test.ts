import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { calculateJwkThumbprint, exportJWK, generateKeyPair } from 'jose';
import { runCli } from '../../src/cli/main';
import { signBundle } from '../../src/modules/bundles/bundle-offline';
import { packBundle } from '../../src/modules/bundles/bundle-pack';
import { generateSigningKeyPair } from '../../src/modules/trust/detached-jws';
import { appendEvents, insertRun, insertStepWithAttempt } from '../factories/run-events';
import { buildPrivateDist } from '../support/dist';
import { createTestDatabase } from '../support/test-database';
import { startTestApp, type TestApp } from '../support/test-app';

interface Result {
  code: number | null;
  stdout: string;
  stderr: string;
}

const ROOT = path.join(__dirname, '..', '..');
const EXAMPLE_DIR = path.join(ROOT, 'bundles', 'example');

/** Every object key anywhere in a JSON value. */
function keysOf(v: unknown): string[] {
  if (Array.isArray(v)) return v.flatMap(keysOf);
  if (v && typeof v === 'object') return Object.entries(v).flatMap(([k, x]) => [k, ...keysOf(x)]);
  return [];
}

describe('audit without a one-liner: keys export, export verify --file, bundle kids', () => {
  let app: TestApp;
  let tmp: string;

  /** `ordo …` in this process, against the test app's database and signing keys. */
  const ordo = async (...args: string[]): Promise<Result> => {
    let stdout = '';
    let stderr = '';
    const code = await runCli(args, {
      out: (t) => (stdout += t),
      err: (t) => (stderr += t),
      env: {
        DATABASE_URL: app.testDb.ownerUrl,
        ORDO_HOME: path.join(tmp, 'cli-home'),
        ORDO_SIGNING_KEYS_DIR: path.join(app.config.home, 'keys'),
        LOG_LEVEL: 'silent',
      },
    });
    return { code, stdout, stderr };
  };

  beforeAll(async () => {
    app = await startTestApp();
    tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'ordo-cli-audit-'));
    const db = app.ordo.database.system;
    for (const [dag, hour] of [
      ['ingest', 1],
      ['report', 2],
    ] as const) {
      const at = new Date(Date.UTC(2026, 2, 1, hour));
      const run = await insertRun(db, app.tenantId, dag, {
        startedAt: at,
        status: 'succeeded',
        finishedAt: new Date(at.getTime() + 1000),
      });
      await appendEvents(db, run, [
        { type: 'run.created', createdAt: at },
        { type: 'run.running', createdAt: at },
        { type: 'run.succeeded', createdAt: at },
      ]);
      await insertStepWithAttempt(db, run, 'only', { logs: 'hello\n', at });
    }
  });
  afterAll(async () => {
    await app?.close();
    fs.rmSync(tmp, { recursive: true, force: true });
  });

  /** The export as GET /api/v1/export serves it, saved as is; and the pinned key file. */
  const fetched = async (): Promise<{ file: string; keyFile: string; text: string }> => {
    const r = await fetch(`${app.url}/api/v1/export`, {
      headers: { authorization: `Bearer ${app.adminToken}`, 'x-tenant-id': app.tenantId },
    });
    expect(r.status).toBe(200);
    const text = await r.text();
    const file = path.join(tmp, 'export.ndjson');
    fs.writeFileSync(file, text);
    const keys = await ordo('keys', 'export', '--public');
    expect(keys.code).toBe(0);
    const keyFile = path.join(tmp, 'instance.jwk.json');
    fs.writeFileSync(keyFile, keys.stdout);
    return { file, keyFile, text };
  };

  it('keys export --public prints a JWK set of the public keys with no private member anywhere', async () => {
    const r = await ordo('keys', 'export', '--public');
    expect(r.code).toBe(0);
    const set = JSON.parse(r.stdout) as { keys: Record<string, string>[] };
    expect(set.keys.length).toBeGreaterThan(0);
    expect(keysOf(set)).not.toContain('d');
    for (const k of set.keys) {
      expect(k).toEqual({
        kty: 'OKP',
        crv: 'Ed25519',
        x: expect.any(String),
        kid: expect.any(String),
        alg: 'EdDSA',
        use: 'sig',
      });
      expect(await calculateJwkThumbprint({ kty: k.kty, crv: k.crv, x: k.x })).toBe(k.kid);
    }
    // The instance signs exports with one of them.
    const { text } = await fetched();
    const manifest = JSON.parse(text.trimEnd().split('\n').pop()!) as { kid: string };
    expect(set.keys.map((k) => k.kid)).toContain(manifest.kid);

    const list = await ordo('keys', 'list', '--json');
    expect(list.code).toBe(0);
    const listed = JSON.parse(list.stdout) as { kid: string; publicJwk: { kid: string } }[];
    expect(listed.map((k) => k.publicJwk)).toEqual(set.keys);
    expect(keysOf(listed)).not.toContain('d');

    const bare = await ordo('keys', 'export');
    expect(bare.code).toBe(2);
    expect(bare.stderr).toMatch(/only --public is exported/);
  });

  it('export verify --file checks an export fetched over HTTP against the key from keys export --public', async () => {
    const { file, keyFile, text } = await fetched();
    const r = await ordo('export', 'verify', '--file', file, '--key', keyFile);
    expect(r).toMatchObject({ code: 0, stderr: '' });
    const records = text.trimEnd().split('\n').length - 1;
    expect(r.stdout).toMatch(
      new RegExp(`^OK: ${records} lines \\(run 2, event 6, step 2, attempt 2, log 2, .*\\), signed by key `),
    );

    // A single JWK works as well as a set.
    const single = path.join(tmp, 'single.jwk.json');
    fs.writeFileSync(
      single,
      JSON.stringify((JSON.parse(fs.readFileSync(keyFile, 'utf8')) as { keys: unknown[] }).keys[0]),
    );
    expect((await ordo('export', 'verify', '--file', file, '--key', single)).code).toBe(0);
  });

  it('export verify --file names the line of a tampered copy, and the manifest line when that one changed', async () => {
    const { keyFile, text } = await fetched();
    const lines = text.split('\n');
    const tampered = path.join(tmp, 'tampered.ndjson');
    // Line 3 is the first run's second event: its seq changes from 2 to 7.
    const at = 2;
    expect(lines[at]).toContain('"seq":2');
    fs.writeFileSync(tampered, lines.map((l, i) => (i === at ? l.replace('"seq":2', '"seq":7') : l)).join('\n'));
    const r = await ordo('export', 'verify', '--file', tampered, '--key', keyFile);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain(`verification FAILED: ${tampered} line ${at + 1}: content does not match its lineHash`);

    const last = lines.length - 1; // the manifest line (the text ends with a newline)
    fs.writeFileSync(tampered, lines.map((l, i) => (i === last - 1 ? l.replace('"run":2', '"run":3') : l)).join('\n'));
    const m = await ordo('export', 'verify', '--file', tampered, '--key', keyFile);
    expect(m.code).toBe(1);
    expect(m.stderr).toContain(
      `${tampered} line ${last}: the manifest line (line ${last}) differs from the signed manifest`,
    );
  });

  it('export verify --file names the signing kid when the pinned key is another one', async () => {
    const { file, text } = await fetched();
    const signer = (JSON.parse(text.trimEnd().split('\n').pop()!) as { kid: string }).kid;
    const { publicKey } = await generateKeyPair('EdDSA', { crv: 'Ed25519' });
    const other = await exportJWK(publicKey);
    const otherKid = await calculateJwkThumbprint(other);
    const otherFile = path.join(tmp, 'other.jwk.json');
    fs.writeFileSync(otherFile, JSON.stringify({ keys: [{ ...other, kid: otherKid }] }));
    const r = await ordo('export', 'verify', '--file', file, '--key', otherFile);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain(`the export is signed by key ${signer}, which is not the pinned key`);
    expect(r.stderr).toContain(otherKid);
  });

  it('export verify answers a missing file, a missing or private key and --file without --key clearly', async () => {
    const { file, keyFile } = await fetched();
    const missing = path.join(tmp, 'nope.ndjson');
    const a = await ordo('export', 'verify', '--file', missing, '--key', keyFile);
    expect(a.code).toBe(1);
    expect(a.stderr).toContain(`cannot read ${missing}: no such file`);

    const noKey = path.join(tmp, 'nope.jwk.json');
    const b = await ordo('export', 'verify', '--file', file, '--key', noKey);
    expect(b.code).toBe(1);
    expect(b.stderr).toContain(`cannot read the key file ${noKey}: no such file`);

    const { privateJwk } = await generateSigningKeyPair();
    const priv = path.join(tmp, 'private.jwk.json');
    fs.writeFileSync(priv, JSON.stringify(privateJwk));
    const c = await ordo('export', 'verify', '--file', file, '--key', priv);
    expect(c.code).toBe(1);
    expect(c.stderr).toMatch(/holds a private key \(member d\): pin the public key only/);

    const d = await ordo('export', 'verify', '--file', file);
    expect(d.code).toBe(2);
    expect(d.stderr).toMatch(/--key FILE is required with --file/);

    // A directory export handed to --file: its last line is a record, not the manifest.
    const dir = path.join(tmp, 'dir-export');
    expect((await ordo('export', '--out', dir, '--tenant', app.tenantId)).code).toBe(0);
    const e = await ordo('export', 'verify', '--file', path.join(dir, 'export.ndjson'), '--key', keyFile);
    expect(e.code).toBe(1);
    expect(e.stderr).toMatch(/the last line is not the signed manifest .*run `ordo export verify DIR`/);
    expect((await ordo('export', 'verify', dir, '--key', keyFile)).code).toBe(0);
  });

  it('bundle keygen refuses the kid of the shipped example key', async () => {
    const out = path.join(tmp, 'my-keys');
    const r = await ordo('bundle', 'keygen', '--kid', 'example-only', '--out', out);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/--kid example-only is the kid of the shipped example key/);
    expect(fs.existsSync(out)).toBe(false);
    const ok = await ordo('bundle', 'keygen', '--kid', 'acme-2026', '--out', out);
    expect(ok.code).toBe(0);
    const again = await ordo('bundle', 'keygen', '--kid', 'acme-2026', '--out', out);
    expect(again.code).toBe(1);
    expect(again.stderr).toMatch(/acme-2026\.private\.jwk exists: keygen never overwrites a key/);
  });

  it('bundle keygen --tenant refuses a kid that tenant already trusts', async () => {
    const t = await app.tenant('kid-taken');
    const { publicJwk } = await generateSigningKeyPair('team-1');
    const add = await app.request('POST', '/api/v1/trust/keys', {
      as: t,
      body: { kid: 'team-1', owner: 'team', publicJwk },
    });
    expect(add.status).toBe(201);
    const out = path.join(tmp, 'team-keys');
    const r = await ordo('bundle', 'keygen', '--kid', 'team-1', '--tenant', 'kid-taken', '--out', out);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('--kid team-1: tenant kid-taken already has a trust key with this kid (owner "team")');
    expect(fs.existsSync(out)).toBe(false);
    expect((await ordo('bundle', 'keygen', '--kid', 'team-2', '--tenant', 'kid-taken', '--out', out)).code).toBe(0);
    expect((await ordo('bundle', 'keygen', '--tenant', 'kid-taken', '--out', out)).code).toBe(2);
  });

  it('answers an import signed by another key under a trusted kid with an error naming the kid and the differing key', async () => {
    const trusted = JSON.parse(
      fs.readFileSync(path.join(EXAMPLE_DIR, 'keys', 'EXAMPLE-ONLY-example-only.public.jwk'), 'utf8'),
    ) as Record<string, string>;
    const t = await app.tenant('kid-clash');
    const add = await app.request('POST', '/api/v1/trust/keys', {
      as: t,
      body: { kid: 'example-only', owner: 'ordo-examples', publicJwk: trusted },
    });
    expect(add.status).toBe(201);
    const { privateJwk } = await generateSigningKeyPair('example-only');
    const packed = await packBundle(EXAMPLE_DIR, { created: new Date('2026-01-01T00:00:00Z') });
    const { signature } = await signBundle(packed.tarball, privateJwk);
    const r = await app.request('POST', '/api/v1/bundles', {
      as: t,
      body: { bundle: Buffer.from(packed.tarball).toString('base64'), signature },
    });
    expect(r.status).toBe(422);
    expect(r.body.error.code).toBe('BUNDLE_SIGNATURE_INVALID');
    expect(r.body.error.message).toMatch(/does not verify with the trusted key example-only/);
    expect(r.body.error.message).toMatch(
      /signed by a different key that reuses the kid example-only; the trusted key with kid example-only differs/,
    );
  });
});

describe('entry points and the first start', () => {
  let dist: ReturnType<typeof buildPrivateDist>;
  let tmp: string;
  beforeAll(() => {
    dist = buildPrivateDist();
    tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'ordo-entry-'));
  });
  afterAll(() => fs.rmSync(tmp, { recursive: true, force: true }));

  const run = (node: string, args: string[], env: Record<string, string>, until?: RegExp): Promise<Result> =>
    new Promise((resolve, reject) => {
      const child = spawn(node, args, { env: { PATH: process.env.PATH, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
      let stdout = '';
      let stderr = '';
      child.stdout.on('data', (d: Buffer) => {
        stdout += d.toString();
        if (until?.test(stdout)) child.kill('SIGTERM');
      });
      child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
      const timer = setTimeout(() => child.kill('SIGKILL'), 60_000);
      child.on('error', reject);
      child.on('close', (code) => {
        clearTimeout(timer);
        resolve({ code, stdout, stderr });
      });
    });

  // The system Node (Debian's) is older than Ordo's on the machines CI runs on.
  const OLD_NODE = '/usr/bin/node';

  it('refuses a Node older than 24 in every entry point, before creating ORDO_HOME or starting PostgreSQL', async () => {
    if (!fs.existsSync(OLD_NODE)) {
      process.stderr.write(`skipped: no ${OLD_NODE} to try the entry points with an old Node\n`);
      return;
    }
    const version = await run(OLD_NODE, ['-p', 'process.versions.node'], {});
    if (Number(version.stdout.split('.')[0]) >= 24) {
      process.stderr.write(`skipped: ${OLD_NODE} is Node ${version.stdout.trim()}, not older than 24\n`);
      return;
    }
    for (const entry of [dist.main, dist.cli, path.join(ROOT, 'bin', 'ordo.js')]) {
      const home = path.join(tmp, `home-${path.basename(path.dirname(entry))}-${path.basename(entry)}`);
      const args = entry === dist.main ? [entry] : [entry, 'tenants', 'list'];
      const r = await run(OLD_NODE, args, { ORDO_HOME: home, PORT: '0' });
      expect({ entry, code: r.code, stdout: r.stdout }).toEqual({ entry, code: 1, stdout: '' });
      expect(r.stderr).toMatch(/^Ordo needs Node\.js 24 or newer, found v\d+\.\d+\.\d+ at \/usr\/bin\/node\./);
      expect(fs.existsSync(home)).toBe(false);
    }
  });

  it('states the first-start tokens’ 10-year lifetime beside the default one in the banner', async () => {
    const db = await createTestDatabase();
    try {
      const home = path.join(tmp, 'first-start');
      const r = await run(
        process.execPath,
        [dist.main],
        {
          DATABASE_URL: db.ownerUrl,
          ORDO_HOME: home,
          HOST: '127.0.0.1',
          PORT: '0',
          ORDO_ROLES: 'api',
          LOG_LEVEL: 'warn',
        },
        /Try it:\n.*\n/,
      );
      const out = r.stdout;
      const creds = JSON.parse(fs.readFileSync(path.join(home, 'admin-credentials.json'), 'utf8')) as {
        adminTokenExpiresAt: string;
        platformTokenExpiresAt: string;
      };
      const years = (iso: string) => (Date.parse(iso) - Date.now()) / (365.25 * 24 * 3600 * 1000);
      expect(years(creds.adminTokenExpiresAt)).toBeCloseTo(10, 1);
      expect(years(creds.platformTokenExpiresAt)).toBeCloseTo(10, 1);
      expect(out).toContain(
        `Tenant admin token (orchestrator:admin, expires ${creds.adminTokenExpiresAt.slice(0, 10)})`,
      );
      expect(out).toContain(
        `Platform operator token (platform:admin, expires ${creds.platformTokenExpiresAt.slice(0, 10)})`,
      );
      expect(out).toContain('These two live 10 years, unlike tokens minted later (ORDO_TOKEN_TTL_SECONDS: 30 days)');
    } finally {
      await db.drop();
    }
  });
});
