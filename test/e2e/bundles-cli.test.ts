import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { buildPrivateDist } from '../support/dist';
import { startTestApp, type TestApp } from '../support/test-app';

interface Result {
  code: number | null;
  stdout: string;
  stderr: string;
}

const EXAMPLE_DIR = path.join(__dirname, '../../bundles/example');

describe('ordo bundle (CLI)', () => {
  let app: TestApp;
  let dist: ReturnType<typeof buildPrivateDist>;
  let home: string;
  let work: string;

  /** Runs `ordo bundle …` as a process against the test app's database. */
  const ordo = (...args: string[]): Promise<Result> =>
    new Promise((resolve, reject) => {
      const child = spawn(process.execPath, [dist.cli, 'bundle', ...args], {
        cwd: work,
        env: {
          PATH: process.env.PATH,
          DATABASE_URL: app.testDb.ownerUrl,
          ORDO_HOME: home,
          ORDO_SIGNING_KEYS_DIR: path.join(app.config.home, 'keys'),
        },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let stdout = '';
      let stderr = '';
      child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
      child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
      const timer = setTimeout(() => child.kill('SIGKILL'), 30_000);
      child.on('error', reject);
      child.on('close', (code) => {
        clearTimeout(timer);
        resolve({ code, stdout, stderr });
      });
    });

  beforeAll(async () => {
    dist = buildPrivateDist();
    app = await startTestApp();
    home = fs.mkdtempSync(path.join(os.tmpdir(), 'ordo-bundle-cli-home-'));
    work = fs.mkdtempSync(path.join(os.tmpdir(), 'ordo-bundle-cli-work-'));
  });
  afterAll(async () => {
    await app?.close();
    dist?.remove();
    fs.rmSync(home, { recursive: true, force: true });
    fs.rmSync(work, { recursive: true, force: true });
  });

  it('keygen → pack → sign → verify → trust → import, then the DAGs are served by the API', async () => {
    const keygen = await ordo('keygen', '--out', 'keys', '--kid', 'cli-key');
    expect(keygen).toMatchObject({ code: 0, stdout: 'cli-key\n' });
    expect(fs.statSync(path.join(work, 'keys', 'cli-key.private.jwk')).mode & 0o777).toBe(0o600);
    const publicJwk = JSON.parse(fs.readFileSync(path.join(work, 'keys', 'cli-key.public.jwk'), 'utf8')) as Record<
      string,
      unknown
    >;
    expect(publicJwk.d).toBeUndefined();

    const pack1 = await ordo('pack', EXAMPLE_DIR, '--out', 'a.tar.gz', '--created', '2026-01-01T00:00:00Z');
    const pack2 = await ordo('pack', EXAMPLE_DIR, '--out', 'b.tar.gz', '--created', '2026-01-01T00:00:00Z');
    expect(pack1.code).toBe(0);
    expect(pack1.stdout).toMatch(/^[0-9a-f]{64}\n$/);
    expect(fs.readFileSync(path.join(work, 'a.tar.gz')).equals(fs.readFileSync(path.join(work, 'b.tar.gz')))).toBe(
      true,
    );
    expect(pack2.stdout).toBe(pack1.stdout);

    expect((await ordo('sign', 'a.tar.gz', '--key', 'keys/cli-key.private.jwk')).code).toBe(0);
    const verify = await ordo('verify', 'a.tar.gz', '--pubkey', 'keys/cli-key.public.jwk');
    expect(verify).toMatchObject({ code: 0, stdout: pack1.stdout });

    // The key is not trusted yet: import refuses it, nothing is imported.
    const untrusted = await ordo('import', 'a.tar.gz', '--tenant', app.tenantId);
    expect(untrusted.code).toBe(1);
    expect(untrusted.stderr).toContain('BUNDLE_KEY_UNTRUSTED');

    const as = { token: app.adminToken, tenantId: app.tenantId };
    const trusted = await app.request('POST', '/api/v1/trust/keys', {
      as,
      body: { kid: 'cli-key', owner: 'example-publisher', publicJwk },
    });
    expect(trusted.status).toBe(201);
    const imported = await ordo('import', 'a.tar.gz', '--tenant', app.tenantId);
    expect(imported).toMatchObject({ code: 0, stdout: pack1.stdout });
    expect(imported.stderr).toContain('imported example@1.0.0');
    const again = await ordo('import', 'a.tar.gz', '--tenant', app.tenantId);
    expect(again.stderr).toContain('already imported');

    const dag = await app.request('GET', '/api/v1/dags/example-greet', { as });
    expect(dag.status).toBe(200);
    expect(dag.body.bundleHash).toBe(pack1.stdout.trim());
    expect(dag.body.owner).toBe('cli');

    const run = await app.request('POST', '/api/v1/runs', {
      as,
      body: { dagId: 'example-greet', inputs: { name: 'Ada' }, runToken: 'bundle-cli-1' },
    });
    expect(run.status).toBe(201);
  });

  it('verify exits 1 with BUNDLE_SIGNATURE_INVALID for a public key other than the signer', async () => {
    await ordo('keygen', '--out', 'other', '--kid', 'cli-key');
    const r = await ordo('verify', 'a.tar.gz', '--pubkey', 'other/cli-key.public.jwk');
    expect(r.code).toBe(1);
    expect(r.stderr).toContain('BUNDLE_SIGNATURE_INVALID');
  });

  it('exits 2 on a usage error', async () => {
    const r = await ordo('pack', EXAMPLE_DIR);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('missing --out');
  });
});
