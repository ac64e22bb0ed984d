import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { sql, type Transaction } from 'kysely';
import pg from 'pg';
import WebSocket from 'ws';
import { Database } from '../../src/core/database/database';
import type { DB } from '../../src/core/database/db.generated';
import { APP_ROLE, SYSTEM_ROLE, applicationUrls, migrate } from '../../src/core/database/migrator';
import { buildPrivateDist } from '../support/dist';
import { createTestDatabase, type TestDatabase } from '../support/test-database';

/**
 * Ordo behind PgBouncer (the Debian package) in transaction mode, as docs/operations.md
 * ("PgBouncer") sets it up: the api, scheduler and worker processes send their pools' traffic
 * through it (ORDO_POOLER_DATABASE_URL) and keep their listeners, job runner and migrations on
 * the direct connection; the core of the e2e suite runs through it.
 */

const START_TIMEOUT_MS = 40_000;
/** The database name clients ask PgBouncer for; PgBouncer maps it to the test database. */
const ALIAS = 'ordo';
const ADMIN = 'ordo_pgbouncer_admin';
const ADMIN_PASSWORD = 'pgbouncer-admin-test';

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

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The pgbouncer binary, or an error saying how to install it (the test fails, it never skips). */
function pgbouncerBinary(): string {
  for (const p of ['/usr/sbin/pgbouncer', '/usr/bin/pgbouncer']) if (fs.existsSync(p)) return p;
  try {
    return execFileSync('sh', ['-c', 'command -v pgbouncer'], { encoding: 'utf8' }).trim();
  } catch {
    throw new Error(
      'pgbouncer is not installed: this test runs Ordo behind a real PgBouncer. Install the Debian package ' +
        '(apt-get install -y pgbouncer), as .ci/run does.',
    );
  }
}

interface Bouncer {
  port: number;
  /** ORDO_POOLER_DATABASE_URL for Ordo: the pooler's address and database, no credentials. */
  poolerUrl: string;
  /** A query on PgBouncer's admin console (SHOW …). */
  admin(command: string): Promise<Record<string, unknown>[]>;
  stop(): Promise<void>;
}

/**
 * Starts PgBouncer in transaction mode on a free port in front of `db`: the pgbouncer.ini of
 * docs/operations.md, with the application roles' passwords in its auth file. As root it runs as
 * the user postgres (PgBouncer refuses to run as root).
 */
async function startPgBouncer(db: TestDatabase): Promise<Bouncer> {
  const bin = pgbouncerBinary();
  const port = await freePort();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ordo-pgbouncer-'));
  const server = new URL(db.ownerUrl);
  // The roles' SCRAM secrets, read as docs/operations.md says: PgBouncer checks the client's
  // password with them and logs in to PostgreSQL with them (SCRAM pass-through).
  const owner = new pg.Client({ connectionString: db.ownerUrl });
  await owner.connect();
  const secrets = await owner
    .query<{ line: string }>(
      `select format('"%s" "%s"', rolname, rolpassword) as line from pg_authid where rolname in ($1, $2) order by 1`,
      [APP_ROLE, SYSTEM_ROLE],
    )
    .finally(() => owner.end());
  expect(secrets.rows.map((r) => r.line)).toEqual([
    expect.stringMatching(/^"ordo_app" "SCRAM-SHA-256\$/),
    expect.stringMatching(/^"ordo_system" "SCRAM-SHA-256\$/),
  ]);
  fs.writeFileSync(
    path.join(dir, 'userlist.txt'),
    [...secrets.rows.map((r) => r.line), `"${ADMIN}" "${ADMIN_PASSWORD}"`].map((l) => `${l}\n`).join(''),
    { mode: 0o600 },
  );
  fs.writeFileSync(
    path.join(dir, 'pgbouncer.ini'),
    [
      '[databases]',
      `${ALIAS} = host=${server.hostname} port=${server.port || 5432} dbname=${db.name}`,
      '[pgbouncer]',
      'listen_addr = 127.0.0.1',
      `listen_port = ${port}`,
      'unix_socket_dir =',
      'pool_mode = transaction',
      'auth_type = scram-sha-256',
      `auth_file = ${path.join(dir, 'userlist.txt')}`,
      `admin_users = ${ADMIN}`,
      'max_client_conn = 500',
      'default_pool_size = 10',
      'server_reset_query =',
      '',
    ].join('\n'),
  );
  const args = [path.join(dir, 'pgbouncer.ini')];
  if (process.getuid?.() === 0) {
    const uid = Number(execFileSync('id', ['-u', 'postgres'], { encoding: 'utf8' }).trim());
    const gid = Number(execFileSync('id', ['-g', 'postgres'], { encoding: 'utf8' }).trim());
    for (const f of ['', 'userlist.txt', 'pgbouncer.ini']) fs.chownSync(path.join(dir, f), uid, gid);
    args.unshift('-u', 'postgres');
  }
  const child: ChildProcess = spawn(bin, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  let log = '';
  child.stdout!.on('data', (d: Buffer) => (log += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (log += d.toString()));
  const admin = async (command: string) => {
    const c = new pg.Client({ host: '127.0.0.1', port, user: ADMIN, password: ADMIN_PASSWORD, database: 'pgbouncer' });
    await c.connect();
    try {
      // The admin console speaks the simple protocol only.
      return (await c.query({ text: command, queryMode: 'simple' } as pg.QueryConfig)).rows as Record<
        string,
        unknown
      >[];
    } finally {
      await c.end();
    }
  };
  const deadline = Date.now() + 10_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`pgbouncer exited with ${child.exitCode}:\n${log}`);
    if (
      await admin('show version').then(
        () => true,
        () => false,
      )
    )
      break;
    if (Date.now() > deadline) throw new Error(`pgbouncer did not start:\n${log}`);
    await sleep(100);
  }
  return {
    port,
    poolerUrl: `postgres://127.0.0.1:${port}/${ALIAS}`,
    admin,
    async stop() {
      if (child.exitCode === null && child.signalCode === null) {
        const exited = new Promise((r) => child.once('exit', r));
        child.kill('SIGTERM');
        await exited;
      }
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}

interface OrdoProcess {
  child: ChildProcess;
  url: string;
  output(): string;
  stop(): Promise<number | null>;
}

interface Msg {
  type: string;
  [k: string]: unknown;
}

describe('Ordo behind PgBouncer in transaction mode', () => {
  let dist: ReturnType<typeof buildPrivateDist>;
  let db: TestDatabase;
  let bouncer: Bouncer;
  let home: string;
  const procs: OrdoProcess[] = [];

  const start = async (env: Record<string, string>): Promise<OrdoProcess> => {
    const child = spawn(process.execPath, [dist.main], {
      env: {
        PATH: process.env.PATH,
        HOST: '127.0.0.1',
        PORT: '0',
        LOG_LEVEL: 'warn',
        ORDO_HOME: home,
        DATABASE_URL: db.ownerUrl,
        ORDO_POOLER_DATABASE_URL: bouncer.poolerUrl,
        ORDO_DB_POOL_SIZE: '6',
        ...env,
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (out += d.toString()));
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    const p: OrdoProcess = {
      child,
      url: '',
      output: () => out,
      async stop() {
        if (child.exitCode !== null || child.signalCode !== null) return child.exitCode;
        child.kill('SIGTERM');
        const timer = setTimeout(() => child.kill('SIGKILL'), 15_000);
        const code = await exited;
        clearTimeout(timer);
        return code;
      },
    };
    procs.push(p);
    const deadline = Date.now() + START_TIMEOUT_MS;
    for (;;) {
      const m = /API:\s+(http:\/\/127\.0\.0\.1:\d+)\/api\/v1/.exec(out) ?? /(http:\/\/127\.0\.0\.1:\d+)/.exec(out);
      if (m) {
        p.url = m[1];
        const r = await fetch(`${p.url}/readyz`).catch(() => undefined);
        if (r?.status === 200) return p;
      }
      if (child.exitCode !== null) throw new Error(`ordo exited with ${child.exitCode}:\n${out}`);
      if (Date.now() > deadline) throw new Error(`ordo did not start in time:\n${out}`);
      await sleep(100);
    }
  };

  beforeAll(async () => {
    dist = buildPrivateDist();
    db = await createTestDatabase();
    bouncer = await startPgBouncer(db);
    home = fs.mkdtempSync(path.join(os.tmpdir(), 'ordo-pgb-home-'));
  }, 60_000);

  afterAll(async () => {
    for (const p of procs) await p.stop();
    await bouncer?.stop();
    await db?.drop();
    if (home) fs.rmSync(home, { recursive: true, force: true });
  });

  it('runs the core through PgBouncer: publish, runs to success, the stream, an idempotent repeat, a retry, cancel, a cross-tenant 404', async () => {
    // The api process migrates and bootstraps first; the scheduler and worker join it.
    const api = await start({ ORDO_ROLES: 'api' });
    const [scheduler, worker] = await Promise.all([
      start({ ORDO_ROLES: 'scheduler' }),
      start({ ORDO_ROLES: 'worker' }),
    ]);
    const creds = JSON.parse(fs.readFileSync(path.join(home, 'admin-credentials.json'), 'utf8')) as {
      tenantId: string;
      adminToken: string;
      platformToken: string;
    };
    const call = async (method: string, url: string, token: string, tenant?: string, body?: unknown) => {
      const headers: Record<string, string> = { authorization: `Bearer ${token}` };
      if (tenant) headers['x-tenant-id'] = tenant;
      if (body !== undefined) headers['content-type'] = 'application/json';
      const r = await fetch(`${api.url}/api/v1${url}`, {
        method,
        headers,
        body: body === undefined ? undefined : JSON.stringify(body),
      });
      const text = await r.text();
      return { status: r.status, body: (text ? JSON.parse(text) : {}) as Record<string, any> };
    };
    const as = (method: string, url: string, body?: unknown) =>
      call(method, url, creds.adminToken, creds.tenantId, body);
    const waitFor = async (runId: string, statuses: string[], ms = 30_000) => {
      const deadline = Date.now() + ms;
      for (;;) {
        const r = await as('GET', `/runs/${runId}`);
        expect(r.status).toBe(200);
        if (statuses.includes(r.body.status as string)) return r.body;
        if (Date.now() > deadline) throw new Error(`run ${runId} still ${r.body.status} after ${ms} ms`);
        await sleep(50);
      }
    };

    // Another tenant, for the cross-tenant checks.
    expect(
      (await call('POST', '/tenants', creds.platformToken, undefined, { id: 'pgb-other', name: 'o' })).status,
    ).toBe(201);
    const other = await call('POST', '/tenants/pgb-other/tokens', creds.platformToken, undefined, {
      scopes: ['orchestrator:admin'],
    });
    expect(other.status).toBe(201);

    const chain = {
      id: 'pgb-chain',
      inputs: { type: 'object', properties: { k: { type: 'string' } }, required: ['k'] },
      steps: [
        { id: 'a', plugin: 'noop', with: { output: { k: '${{ inputs.k }}' } } },
        { id: 'b', plugin: 'noop', dependsOn: ['a'], with: { output: { k: '${{ steps.a.outputs.k }}' } } },
        { id: 'c', plugin: 'noop', dependsOn: ['a'], with: { output: { k: '${{ steps.a.outputs.k }}' } } },
        { id: 'd', plugin: 'noop', dependsOn: ['b', 'c'], with: { output: { k: '${{ steps.b.outputs.k }}' } } },
      ],
    };
    const slow = { id: 'pgb-slow', steps: [{ id: 'z', plugin: 'noop', with: { sleepMs: 60_000 } }] };
    // A retryable failure: its retry is a graphile-worker job, run by the worker's direct job runner.
    const retry = {
      id: 'pgb-retry',
      steps: [
        {
          id: 'f',
          plugin: 'noop',
          with: { fail: true, retryable: true },
          retry: { maxRetries: 1, initialDelay: 200, multiplier: 1, maxDelay: 200 },
        },
      ],
    };
    for (const def of [chain, slow, retry]) expect((await as('POST', '/dags', def)).status).toBe(201);

    // The stream, on an api process whose pools go through PgBouncer and whose listener does not.
    const ws = new WebSocket(`${api.url.replace('http', 'ws')}/api/v1/stream`, {
      headers: { authorization: `Bearer ${creds.adminToken}`, 'x-tenant-id': creds.tenantId },
    });
    const messages: Msg[] = [];
    ws.on('message', (d) => messages.push(JSON.parse((d as Buffer).toString('utf8')) as Msg));
    await new Promise<void>((resolve, reject) => {
      ws.once('open', () => resolve());
      ws.once('error', reject);
    });
    try {
      const until = async (pred: () => boolean, what: string, ms = 20_000) => {
        const deadline = Date.now() + ms;
        while (!pred()) {
          if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}: ${JSON.stringify(messages)}`);
          await sleep(25);
        }
      };
      await until(() => messages.some((m) => m.type === 'ready'), 'ready');
      ws.send(JSON.stringify({ type: 'subscribe', id: 'all', filter: {} }));
      await until(() => messages.some((m) => m.type === 'subscribed'), 'subscribed');

      // Runs start and succeed.
      const runIds: string[] = [];
      for (let i = 0; i < 8; i++) {
        const r = await as('POST', '/runs', { dagId: chain.id, inputs: { k: `k${i}` }, runToken: `pgb-${i}` });
        expect(r.status).toBe(201);
        runIds.push(r.body.runId as string);
      }
      for (const id of runIds)
        expect((await waitFor(id, ['succeeded', 'failed', 'cancelled'])).status).toBe('succeeded');
      const attemptsOfD = await as('GET', `/runs/${runIds[3]}/steps/d/attempts`);
      expect(attemptsOfD.body.items).toMatchObject([{ attempt: 1, status: 'succeeded' }]);

      // The stream delivers each run's completion.
      const completed = () =>
        new Set(
          messages
            .filter((m) => m.type === 'event' && m.event === 'run.completed' && m.status === 'succeeded')
            .map((m) => m.runId as string),
        );
      await until(() => runIds.every((id) => completed().has(id)), 'every run.completed');
      expect(messages.filter((m) => m.type === 'event' && m.event === 'step.updated').length).toBeGreaterThanOrEqual(
        4 * runIds.length,
      );

      // An idempotent repeat: the same runToken and inputs answer the same run.
      const again = await as('POST', '/runs', { dagId: chain.id, inputs: { k: 'k0' }, runToken: 'pgb-0' });
      expect(again.status).toBe(200);
      expect(again.body.runId).toBe(runIds[0]);

      // A retry scheduled as a job, run, and the run fails after its second attempt.
      const failing = await as('POST', '/runs', { dagId: retry.id, runToken: 'pgb-retry' });
      expect(failing.status).toBe(201);
      expect((await waitFor(failing.body.runId as string, ['succeeded', 'failed', 'cancelled'])).status).toBe('failed');
      const events = await as('GET', `/runs/${failing.body.runId}/events?limit=1000`);
      const attempts = (events.body.items as { type: string; attempt: number | null }[])
        .filter((e) => e.type === 'step.running')
        .map((e) => e.attempt);
      expect(attempts).toEqual([1, 2]);

      // Cancel a running run.
      const long = await as('POST', '/runs', { dagId: slow.id, runToken: 'pgb-slow' });
      expect(long.status).toBe(201);
      const longId = long.body.runId as string;
      await waitFor(longId, ['running']);
      // Not another tenant's to see or cancel.
      const otherAs = { token: other.body.token as string, tenant: 'pgb-other' };
      expect((await call('GET', `/runs/${longId}`, otherAs.token, otherAs.tenant)).status).toBe(404);
      expect((await call('POST', `/runs/${longId}/cancel`, otherAs.token, otherAs.tenant)).status).toBe(404);
      expect((await as('POST', `/runs/${longId}/cancel`)).status).toBe(200);
      expect((await waitFor(longId, ['succeeded', 'failed', 'cancelled'])).status).toBe('cancelled');
      await until(
        () => messages.some((m) => m.type === 'event' && m.runId === longId && m.status === 'cancelled'),
        'the cancelled run on the stream',
      );
    } finally {
      ws.terminate();
    }

    // The pools' traffic went through PgBouncer; the sessions that listen or hold a session lock did not.
    const clients = (await bouncer.admin('show clients')).filter((c) => c.database === ALIAS);
    const names = new Set(clients.map((c) => String(c.application_name)));
    for (const n of ['ordo:api:app', 'ordo:api:system', 'ordo:worker:system', 'ordo:scheduler:system'])
      expect({ n, through: names.has(n) }).toEqual({ n, through: true });
    expect([...names].filter((n) => !/^ordo:(api|worker|scheduler):(app|system)$/.test(n))).toEqual([]);
    const stats = (await bouncer.admin('show stats')).find((s) => s.database === ALIAS)!;
    expect(Number(stats.total_xact_count)).toBeGreaterThan(100);
    const owner = new pg.Client({ connectionString: db.ownerUrl });
    await owner.connect();
    try {
      const direct = await owner.query<{ application_name: string; role: string }>(
        `select application_name, usename as role from pg_stat_activity
          where datname = current_database() and (application_name like 'ordo:%listen%' or application_name = 'ordo:jobs')`,
      );
      const listeners = new Set(direct.rows.map((r) => r.application_name));
      // The api's token-revocation and stream listeners, the worker's listener and job runner.
      expect(listeners.size).toBeGreaterThanOrEqual(3);
      expect(listeners.has('ordo:jobs')).toBe(true);
      for (const n of listeners) expect(names.has(n)).toBe(false);
    } finally {
      await owner.end();
    }

    for (const p of [api, scheduler, worker]) {
      const code = await p.stop();
      expect({ code, output: code === 0 ? '' : p.output().slice(-3000) }).toEqual({ code: 0, output: '' });
    }
  }, 180_000);

  it('a transaction left idle past idle_in_transaction_session_timeout is ended by the server, through PgBouncer too; the pool carries on', async () => {
    // The roles' timeouts as the migration sets them, short enough for a test.
    await migrate(db.ownerUrl, { timeouts: { statementMs: 1_000, idleInTransactionMs: 1_000 } });
    // Server connections PgBouncer opened before keep the values they logged in with: new ones, please.
    await bouncer.admin(`reconnect ${ALIAS}`);
    const { appUrl, systemUrl } = applicationUrls(db.ownerUrl);
    const owner = new pg.Client({ connectionString: db.ownerUrl });
    await owner.connect();
    const ownerSettings = await owner
      .query('select current_setting($1) as statement, current_setting($2) as idle', [
        'statement_timeout',
        'idle_in_transaction_session_timeout',
      ])
      .finally(() => owner.end());
    expect(ownerSettings.rows[0]).toEqual({ statement: '0', idle: '0' });
    for (const pooler of [undefined, bouncer.poolerUrl]) {
      const database = new Database(
        { app: appUrl, system: systemUrl, pooler },
        { poolSize: 4, applicationName: 'ordo:timeouts' },
      );
      try {
        // A holder that pauses inside its transaction while holding a row lock.
        const paused = database.withSystem(async (tx) => {
          await tx.selectFrom('tenant').select('id').where('id', '=', 'pgb-other').forUpdate().execute();
          await sleep(3_000);
          await tx.selectFrom('tenant').select('id').execute();
        });
        const outcome = paused.then(
          () => 'committed',
          (e: Error) => e.message,
        );
        await sleep(200);
        // Another session waits for the lock, and gets it once the server ends the paused transaction.
        const t0 = Date.now();
        await database.withSystem((tx) =>
          tx.updateTable('tenant').set({ name: 'o2' }).where('id', '=', 'pgb-other').execute(),
        );
        const waited = Date.now() - t0;
        expect({ pooler, waited: waited < 2_800 }).toEqual({ pooler, waited: true });
        expect({ pooler, outcome: await outcome }).not.toEqual({ pooler, outcome: 'committed' });
        // The next transactions find a working connection.
        for (let i = 0; i < 6; i++)
          expect(
            (await database.withTenant('pgb-other', (tx) => tx.selectFrom('run').select('run_id').execute())).length,
          ).toBe(0);
        // And a statement past statement_timeout is cancelled.
        await expect(database.withSystem((tx) => sqlSleep(tx, 2))).rejects.toMatchObject({ code: '57014' });
        // Both roles have the timeouts; the owner, which migrates, has none.
        expect(await database.withSystem((tx) => show(tx))).toEqual({ statement: '1s', idle: '1s' });
        expect(await database.withTenant('pgb-other', (tx) => show(tx))).toEqual({ statement: '1s', idle: '1s' });
      } finally {
        await database.close();
      }
    }
  }, 60_000);
});

async function show(tx: Transaction<DB>) {
  const r = await sql<{ statement: string; idle: string }>`select current_setting('statement_timeout') as statement,
    current_setting('idle_in_transaction_session_timeout') as idle`.execute(tx);
  return r.rows[0];
}

async function sqlSleep(tx: Transaction<DB>, seconds: number): Promise<void> {
  await sql`select pg_sleep(${seconds})`.execute(tx);
}
