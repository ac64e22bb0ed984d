import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { runCli } from '../../src/cli/main';
import { buildPrivateDist } from '../support/dist';
import { startTestApp, type TestApp } from '../support/test-app';

interface Result {
  code: number | null;
  stdout: string;
  stderr: string;
}

describe('ordo CLI', () => {
  let app: TestApp;
  let dist: ReturnType<typeof buildPrivateDist>;
  let home: string;

  /** Runs `ordo …` as a process against the test app's database and signing keys. */
  const ordo = (...args: string[]): Promise<Result> =>
    new Promise((resolve, reject) => {
      const child = spawn(process.execPath, [dist.cli, ...args], {
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

  /** Runs the same entry point in this process (argument handling needs no separate process). */
  const inProcess = async (...args: string[]): Promise<Result> => {
    let stdout = '';
    let stderr = '';
    const code = await runCli(args, {
      out: (t) => (stdout += t),
      err: (t) => (stderr += t),
      env: { DATABASE_URL: app.testDb.ownerUrl, ORDO_HOME: home },
    });
    return { code, stdout, stderr };
  };

  beforeAll(async () => {
    dist = buildPrivateDist();
    app = await startTestApp();
    home = fs.mkdtempSync(path.join(os.tmpdir(), 'ordo-cli-home-'));
  });
  afterAll(async () => {
    await app?.close();
    dist?.remove();
    fs.rmSync(home, { recursive: true, force: true });
  });

  it('prints the command list for --help and exits 0; exits 2 on stderr for an unknown command (as a process)', async () => {
    const r = await ordo('--help');
    expect(r.code).toBe(0);
    for (const c of ['migrate', 'tenants', 'tokens', 'keys']) expect(r.stdout).toContain(c);
    const bad = await ordo('tokens', 'create', '--tenant', 'default', '--bogus');
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/Unknown option '--bogus'/);
    expect(bad.stdout).toBe('');
  });

  it('prints help on stdout and exits 0 for every command and subcommand given --help', async () => {
    const cmds = [
      ['migrate'],
      ['tenants'],
      ['tokens'],
      ['keys'],
      ['tenants', 'create'],
      ['tokens', 'create'],
      ['help', 'tokens'],
    ];
    const results = await Promise.all(cmds.map((c) => inProcess(...c, ...(c[0] === 'help' ? [] : ['--help']))));
    for (const [i, r] of results.entries()) {
      expect({ cmd: cmds[i], code: r.code, stderr: r.stderr }).toEqual({ cmd: cmds[i], code: 0, stderr: '' });
      expect(r.stdout).toMatch(/^Usage/);
    }
  });

  it('exits 2 with a message on stderr for an unknown command, subcommand, flag or a missing argument', async () => {
    const cases: [string[], RegExp][] = [
      [[], /Usage: ordo/],
      [['frobnicate'], /unknown command "frobnicate"/],
      [['tenants', 'explode'], /unknown subcommand "explode"/],
      [['tenants', 'list', '--bogus'], /Unknown option '--bogus'/],
      [['tenants', 'create'], /missing argument <id>/],
      [['tokens', 'create', '--scopes', 'read'], /missing --tenant/],
      [['tokens', 'create', '--tenant', 'default', '--scopes', 'root'], /unknown scope "root"/],
      [['tokens', 'create', '--tenant', 'default', '--scopes', 'read', '--ttl', 'soon'], /--ttl "soon"/],
      [['tokens', 'revoke', '--tenant', 'default'], /missing argument <jti>/],
      [['tokens', 'revoke', '--tenant', 'default', 'not-a-uuid'], /not a token id/],
      [['tenants', 'create', 'Bad_Id'], /id/],
    ];
    const results = await Promise.all(cases.map(([args]) => inProcess(...args)));
    for (const [i, [args, message]] of cases.entries()) {
      const r = results[i];
      expect({ args, code: r.code }).toEqual({ args, code: 2 });
      expect(r.stderr).toMatch(message);
      expect(r.stdout).toBe('');
    }
  });

  it('migrate reports a current schema and exits 0', async () => {
    const r = await ordo('migrate');
    expect(r.code).toBe(0);
    expect(r.stdout).toBe('database schema is current\n');
  });

  it('creates and lists tenants; a duplicate exits 1 with TENANT_EXISTS', async () => {
    const c = await ordo('tenants', 'create', 'cli-acme', '--name', 'Acme');
    expect(c.code).toBe(0);
    expect(c.stdout).toBe('cli-acme\n');
    const dup = await ordo('tenants', 'create', 'cli-acme');
    expect(dup.code).toBe(1);
    expect(dup.stderr).toContain('TENANT_EXISTS');
    const l = await ordo('tenants', 'list', '--json');
    expect(l.code).toBe(0);
    const list = JSON.parse(l.stdout) as { id: string; name: string; status: string }[];
    expect(list.map((t) => t.id)).toEqual(expect.arrayContaining(['default', 'cli-acme']));
    expect(list.find((t) => t.id === 'cli-acme')).toMatchObject({ name: 'Acme', status: 'active' });
  });

  it('mints a token that works on the API, lists it, revokes it (then 401) and fails for an unknown tenant', async () => {
    const c = await ordo(
      'tokens',
      'create',
      '--tenant',
      app.tenantId,
      '--scopes',
      'read,orchestrator:write',
      '--ttl',
      '2h',
      '--subject',
      'ci-bot',
    );
    expect(c.code).toBe(0);
    const token = c.stdout.trim();
    expect(c.stdout).toBe(`${token}\n`);
    expect(token.split('.')).toHaveLength(3);
    const jti = (JSON.parse(Buffer.from(token.split('.')[1], 'base64url').toString()) as { jti: string }).jti;

    const use = await app.request('GET', '/api/v1/openapi.json');
    expect(use.status).toBe(200);
    const as = { token, tenantId: app.tenantId };
    // A write token cannot list tokens (admin), which proves it authenticated: 403, not 401.
    expect((await app.request('GET', '/api/v1/tokens', { as })).status).toBe(403);

    const l = await ordo('tokens', 'list', '--tenant', app.tenantId, '--json');
    expect(l.code).toBe(0);
    const listed = (JSON.parse(l.stdout) as { jti: string; subject: string; scopes: string[] }[]).find(
      (t) => t.jti === jti,
    );
    expect(listed).toMatchObject({ subject: 'ci-bot', scopes: ['orchestrator:read', 'orchestrator:write'] });

    const rv = await ordo('tokens', 'revoke', '--tenant', app.tenantId, jti);
    expect(rv.code).toBe(0);
    const after = await app.request('GET', '/api/v1/tokens', { as });
    expect(after.status).toBe(401);
    expect(after.body.error.code).toBe('TOKEN_REVOKED');

    const unknown = await ordo('tokens', 'create', '--tenant', 'no-such-tenant', '--scopes', 'read');
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toMatch(/tenant no-such-tenant not found/);
    expect(unknown.stdout).toBe('');
    const unknownList = await ordo('tokens', 'list', '--tenant', 'no-such-tenant');
    expect(unknownList.code).toBe(1);
  });

  it("exits 1 when revoking another tenant's token and leaves that token valid", async () => {
    const other = await app.tenant('cli-other');
    const jti = (JSON.parse(Buffer.from(other.token.split('.')[1], 'base64url').toString()) as { jti: string }).jti;
    const r = await ordo('tokens', 'revoke', '--tenant', app.tenantId, jti);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain('NOT_FOUND');
    expect(
      (await app.request('GET', '/api/v1/tokens', { as: { token: other.token, tenantId: other.tenantId } })).status,
    ).toBe(200);
  });

  it('disables and enables a tenant: its tokens get 403 TENANT_DISABLED, then work again', async () => {
    const t = await app.tenant('cli-flip');
    const as = { token: t.token, tenantId: t.tenantId };
    expect((await ordo('tenants', 'disable', 'cli-flip')).code).toBe(0);
    const r = await app.request('GET', '/api/v1/tokens', { as });
    expect(r.status).toBe(403);
    expect(r.body.error.code).toBe('TENANT_DISABLED');
    expect((await ordo('tenants', 'enable', 'cli-flip')).code).toBe(0);
    expect((await app.request('GET', '/api/v1/tokens', { as })).status).toBe(200);
    expect((await ordo('tenants', 'disable', 'no-such-tenant')).code).toBe(1);
  });

  it('keys rotate adds an active key; tokens of the old key keep working and the app verifies tokens of the new key', async () => {
    const before = JSON.parse((await ordo('keys', 'list', '--json')).stdout) as { kid: string; active: boolean }[];
    expect(before.filter((k) => k.active)).toHaveLength(1);
    const r = await ordo('keys', 'rotate');
    expect(r.code).toBe(0);
    const kid = r.stdout.trim();
    const after = JSON.parse((await ordo('keys', 'list', '--json')).stdout) as { kid: string; active: boolean }[];
    expect(after).toHaveLength(before.length + 1);
    expect(after.find((k) => k.active)?.kid).toBe(kid);
    // The old admin token still verifies.
    expect(
      (await app.request('GET', '/api/v1/tokens', { as: { token: app.adminToken, tenantId: app.tenantId } })).status,
    ).toBe(200);
    // A token the CLI now signs with the new key is accepted by the running app.
    const c = await ordo('tokens', 'create', '--tenant', app.tenantId, '--scopes', 'admin');
    const token = c.stdout.trim();
    expect(JSON.parse(Buffer.from(token.split('.')[0], 'base64url').toString())).toMatchObject({ kid });
    expect((await app.request('GET', '/api/v1/tokens', { as: { token, tenantId: app.tenantId } })).status).toBe(200);
  });

  it('mints, lists and revokes platform tokens with --platform', async () => {
    const r = await ordo('tokens', 'create', '--platform', '--subject', 'ops');
    expect(r.code).toBe(0);
    const token = r.stdout.trim();
    expect((await app.request('GET', '/api/v1/tenants', { as: { token } })).status).toBe(200);
    const jti = (JSON.parse(Buffer.from(token.split('.')[1], 'base64url').toString()) as { jti: string }).jti;
    const l = await ordo('tokens', 'list', '--platform', '--json');
    expect(l.code).toBe(0);
    expect((JSON.parse(l.stdout) as { jti: string; subject: string }[]).find((t) => t.jti === jti)).toMatchObject({
      subject: 'ops',
    });
    const rv = await ordo('tokens', 'revoke', '--platform', jti);
    expect(rv.code).toBe(0);
    const after = await app.request('GET', '/api/v1/tenants', { as: { token } });
    expect(after.status).toBe(401);
    expect(after.body.error.code).toBe('TOKEN_REVOKED');
    expect((await app.request('GET', '/api/v1/tenants', { as: { token: app.platformToken } })).status).toBe(200);
    const missing = await ordo('tokens', 'revoke', '--platform', '00000000-0000-4000-8000-000000000000');
    expect(missing.code).toBe(1);
    expect(missing.stderr).toContain('not found');
  });
});
