import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { buildPrivateDist } from '../support/dist';
import { createTestDatabase, type TestDatabase } from '../support/test-database';

interface OrdoProcess {
  child: ChildProcess;
  url: string;
  stdout(): string;
  stderr(): string;
  /** SIGTERM, then the exit code and how long the process took to exit. */
  stop(): Promise<{ code: number | null; signal: NodeJS.Signals | null; ms: number }>;
}

const START_TIMEOUT_MS = 40_000;

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.listen(0, '127.0.0.1', () => {
      const port = (srv.address() as net.AddressInfo).port;
      srv.close(() => resolve(port));
    });
    srv.on('error', reject);
  });
}

function listening(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = net.connect({ host: '127.0.0.1', port });
    s.once('connect', () => {
      s.destroy();
      resolve(true);
    });
    s.once('error', () => resolve(false));
  });
}

describe('Ordo processes', () => {
  let dist: ReturnType<typeof buildPrivateDist>;
  const started: ChildProcess[] = [];
  const cleanups: (() => Promise<void> | void)[] = [];

  /** Starts `dist/src/main.js`; resolves once it printed its URL and /readyz answers 200. */
  const start = async (env: Record<string, string>): Promise<OrdoProcess> => {
    const child = spawn(process.execPath, [dist.main], {
      env: { PATH: process.env.PATH, HOST: '127.0.0.1', PORT: '0', LOG_LEVEL: 'warn', ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    started.push(child);
    let out = '';
    let err = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (err += d.toString()));
    const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
      child.once('exit', (code, signal) => resolve({ code, signal })),
    );
    const deadline = Date.now() + START_TIMEOUT_MS;
    let url: string | undefined;
    while (!url) {
      const m = /API:\s+(http:\/\/127\.0\.0\.1:\d+)\/api\/v1/.exec(out);
      if (m) url = m[1];
      else if (child.exitCode !== null) throw new Error(`ordo exited with ${child.exitCode}:\n${out}\n${err}`);
      else if (Date.now() > deadline) throw new Error(`ordo did not start in time:\n${out}\n${err}`);
      else await new Promise((r) => setTimeout(r, 50));
    }
    for (;;) {
      const r = await fetch(`${url}/readyz`).catch(() => undefined);
      if (r?.status === 200) break;
      if (Date.now() > deadline) throw new Error(`ordo not ready: ${r?.status}\n${out}\n${err}`);
      await new Promise((res) => setTimeout(res, 100));
    }
    return {
      child,
      url,
      stdout: () => out,
      stderr: () => err,
      async stop() {
        const t0 = Date.now();
        child.kill('SIGTERM');
        const timer = setTimeout(() => child.kill('SIGKILL'), 15_000);
        const r = await exited;
        clearTimeout(timer);
        return { ...r, ms: Date.now() - t0 };
      },
    };
  };

  /** Runs `ordo …` (the compiled CLI) with the given environment. */
  const cli = (
    env: Record<string, string>,
    ...args: string[]
  ): Promise<{ code: number | null; stdout: string; stderr: string }> =>
    new Promise((resolve, reject) => {
      const child = spawn(process.execPath, [dist.cli, ...args], {
        env: { PATH: process.env.PATH, ...env },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      started.push(child);
      let stdout = '';
      let stderr = '';
      child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
      child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
      child.on('error', reject);
      child.on('close', (code) => resolve({ code, stdout, stderr }));
    });

  const tokensWith = async (url: string, token: string, tenantId: string) =>
    (await fetch(`${url}/api/v1/tokens`, { headers: { authorization: `Bearer ${token}`, 'x-tenant-id': tenantId } }))
      .status;

  const tempHome = () => {
    const home = fs.mkdtempSync(path.join(os.tmpdir(), 'ordo-proc-home-'));
    // Traversable, so the embedded PostgreSQL (run as the unprivileged postgres user under root) reaches its data.
    fs.chmodSync(home, 0o711);
    cleanups.push(() => fs.rmSync(home, { recursive: true, force: true }));
    return home;
  };

  beforeAll(() => {
    dist = buildPrivateDist();
  });
  afterAll(async () => {
    for (const c of started) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
    for (const c of cleanups.reverse()) await c();
    dist?.remove();
  });

  describe('with DATABASE_URL', () => {
    let db: TestDatabase;
    beforeAll(async () => {
      db = await createTestDatabase();
      cleanups.push(() => db.drop());
    });

    it('runs api and worker+scheduler processes on one database; first start prints secrets once; SIGTERM stops each', async () => {
      const home = tempHome();
      const env = { DATABASE_URL: db.ownerUrl, ORDO_HOME: home };
      // Started together: both migrate under the advisory lock; only the api process bootstraps.
      const [api, workers] = await Promise.all([
        start({ ...env, ORDO_ROLES: 'api' }),
        start({ ...env, ORDO_ROLES: 'worker,scheduler' }),
      ]);

      // The first start printed the tenant and both tokens, and saved them with mode 0600.
      const file = path.join(home, 'admin-credentials.json');
      expect(fs.statSync(file).mode & 0o777).toBe(0o600);
      const creds = JSON.parse(fs.readFileSync(file, 'utf8')) as {
        tenantId: string;
        adminToken: string;
        platformToken: string;
      };
      expect(api.stdout()).toContain('First start: created tenant "default"');
      expect(api.stdout()).toContain(creds.adminToken);
      expect(api.stdout()).toContain(creds.platformToken);
      expect(workers.stdout()).not.toContain(creds.adminToken);
      expect(workers.stdout()).toMatch(/roles: worker, scheduler/);
      expect(await tokensWith(api.url, creds.adminToken, creds.tenantId)).toBe(200);
      const w = await fetch(`${workers.url}/healthz`);
      expect(w.status).toBe(200);

      for (const s of await Promise.all([api.stop(), workers.stop()])) {
        expect({ code: s.code, signal: s.signal }).toEqual({ code: 0, signal: null });
        expect(s.ms).toBeLessThan(10_000);
      }

      // A restart prints no new secret, and the first start's token still works.
      const again = await start({ ...env, ORDO_ROLES: 'api' });
      expect(again.stdout()).not.toContain('First start');
      expect(again.stdout()).not.toMatch(/eyJ[A-Za-z0-9_-]+\.eyJ/);
      expect(again.stdout()).toContain(file);
      expect(JSON.parse(fs.readFileSync(file, 'utf8'))).toEqual(creds);
      expect(await tokensWith(again.url, creds.adminToken, creds.tenantId)).toBe(200);
      expect((await again.stop()).code).toBe(0);
    });

    it('refuses to start with a bad PORT, ORDO_ROLES or DATABASE_URL, naming the variable, with a non-zero exit', async () => {
      const bad: [string, string][] = [
        ['PORT', 'abc'],
        ['ORDO_ROLES', 'foo'],
        ['DATABASE_URL', 'mysql://x'],
      ];
      const results = await Promise.all(
        bad.map(
          ([name, value]) =>
            new Promise<{ code: number | null; err: string }>((resolve) => {
              const child = spawn(process.execPath, [dist.main], {
                env: { PATH: process.env.PATH, ORDO_HOME: tempHome(), DATABASE_URL: db.ownerUrl, [name]: value },
                stdio: ['ignore', 'pipe', 'pipe'],
              });
              started.push(child);
              let err = '';
              child.stderr.on('data', (d: Buffer) => (err += d.toString()));
              child.once('exit', (code) => resolve({ code, err }));
            }),
        ),
      );
      for (const [i, [name]] of bad.entries()) {
        expect({ name, code: results[i].code }).toEqual({ name, code: 2 });
        expect(results[i].err).toContain(`${name}:`);
      }
    });
  });

  describe('with the embedded PostgreSQL', () => {
    it('starts on a fresh home, prints the secrets once, reuses the data on the next start and stops PostgreSQL with it', async () => {
      const home = tempHome();
      const pgPort = await freePort();
      // All three roles, as `npm start` runs them.
      const env = { ORDO_HOME: home, ORDO_EMBEDDED_PG_PORT: String(pgPort) };
      const first = await start(env);
      cleanups.push(async () => {
        // Last resort if a test failed midway: stop a server the processes left behind.
        const dataDir = path.join(home, 'pg', 'data');
        const pidFile = path.join(dataDir, 'postmaster.pid');
        if (!fs.existsSync(pidFile)) return;
        const n = Number(fs.readFileSync(pidFile, 'utf8').split('\n')[0]);
        // Only the postmaster of this data directory, never a process that reused its pid.
        const cmdline = fs.existsSync(`/proc/${n}/cmdline`) ? fs.readFileSync(`/proc/${n}/cmdline`, 'utf8') : '';
        if (cmdline.includes(dataDir)) process.kill(n, 'SIGINT');
      });
      const file = path.join(home, 'admin-credentials.json');
      const creds = JSON.parse(fs.readFileSync(file, 'utf8')) as { tenantId: string; adminToken: string };
      expect(first.stdout()).toContain(creds.adminToken);
      expect(first.stdout()).toContain('embedded PostgreSQL');
      expect(first.stdout()).toContain(`then delete it (rm ${file})`);
      expect(first.stdout()).toMatch(/Sandbox: {2}bubblewrap/);
      expect(await listening(pgPort)).toBe(true);
      // Every file holding a secret is the service user's alone, in a directory only it may enter.
      for (const f of ['admin-credentials.json', 'keys/signing-keys.json', 'pg/credentials.json']) {
        expect({ f, mode: (fs.statSync(path.join(home, f)).mode & 0o777).toString(8) }).toEqual({ f, mode: '600' });
      }
      expect((fs.statSync(path.join(home, 'keys')).mode & 0o777).toString(8)).toBe('700');

      // The CLI joins the running embedded server and leaves it running.
      const created = await cli(env, 'tenants', 'create', 'emb-cli');
      expect(created).toMatchObject({ code: 0, stdout: 'emb-cli\n' });
      expect(await listening(pgPort)).toBe(true);
      const creds2 = JSON.parse(fs.readFileSync(file, 'utf8')) as { platformToken: string };
      const list = await fetch(`${first.url}/api/v1/tenants`, {
        headers: { authorization: `Bearer ${creds2.platformToken}` },
      });
      expect(((await list.json()) as { items: { id: string }[] }).items.map((t) => t.id)).toContain('emb-cli');

      const s1 = await first.stop();
      expect({ code: s1.code, stderr: s1.code === 0 ? '' : first.stderr().slice(-3000) }).toEqual({
        code: 0,
        stderr: '',
      });
      expect(s1.ms).toBeLessThan(10_000);
      expect(await listening(pgPort)).toBe(false);
      // PostgreSQL stops after the roles, so none of them loses its connection on the way down.
      expect(first.stderr()).not.toMatch(/terminating connection|Connection terminated/);

      // With no server running, the CLI starts the embedded PostgreSQL itself and stops it again.
      const listed = await cli(env, 'tenants', 'list', '--json');
      expect(listed.code).toBe(0);
      expect((JSON.parse(listed.stdout) as { id: string }[]).map((t) => t.id)).toEqual(['default', 'emb-cli']);
      expect(await listening(pgPort)).toBe(false);

      const second = await start(env);
      expect(second.stdout()).not.toContain('First start');
      expect(second.stdout()).not.toContain(creds.adminToken);
      expect(await tokensWith(second.url, creds.adminToken, creds.tenantId)).toBe(200);
      const s2 = await second.stop();
      expect({ code: s2.code, stderr: s2.code === 0 ? '' : second.stderr().slice(-3000) }).toEqual({
        code: 0,
        stderr: '',
      });
      expect(await listening(pgPort)).toBe(false);
    });
  });
});
