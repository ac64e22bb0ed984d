import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { Database } from '../src/core/database/database';
import { startEmbeddedPostgres, type EmbeddedPostgresHandle } from '../src/core/database/embedded';
import { migrate } from '../src/core/database/migrator';
import type { DagDefinitionInput } from '../src/modules/dags/dag-definition';
import { DagsRepository } from '../src/modules/dags/dags.repository';
import { RunsRepository } from '../src/modules/runs/runs.repository';
import { RunsService } from '../src/modules/runs/runs.service';

/** Shared plumbing of the load scenarios: a fresh database, Ordo processes, RSS sampling, statistics. */

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/**
 * Waits (polling every 5 ms, until `deadline` in Date.now() time) until `done` holds for every id;
 * each id is looked at until it is done, not again at every poll. Returns whether all are done.
 */
export async function untilAll(ids: string[], done: (id: string) => boolean, deadline: number): Promise<boolean> {
  let i = 0;
  for (;;) {
    while (i < ids.length && done(ids[i])) i++;
    if (i === ids.length) return true;
    if (Date.now() >= deadline) return false;
    await sleep(5);
  }
}

/** Cleanups of what the running scenario started (processes, database), run on SIGINT/SIGTERM too. */
const pending = new Set<() => Promise<void>>();
function track(fn: () => Promise<void>): () => Promise<void> {
  let running: Promise<void> | undefined;
  const once = () => {
    pending.delete(once);
    running ??= fn();
    return running;
  };
  pending.add(once);
  return once;
}

let signalled: Promise<void> | undefined;

/** The cleanup a SIGINT/SIGTERM started, if any: a scenario failing because of it awaits this and exits 130. */
export const signalCleanup = () => signalled;

/** On SIGINT/SIGTERM: stop every tracked process and database (newest first, bounded), then exit 130. */
export function cleanupOnSignals(): () => void {
  const handler = (signal: NodeJS.Signals) => {
    if (signalled) return;
    log(`${signal}: stopping what the load bench started`);
    const force = setTimeout(() => process.exit(130), 25_000);
    force.unref();
    // Processes (they hold database connections) before their database.
    signalled = (async () => {
      for (const f of [...pending].reverse()) await f().catch(() => undefined);
    })();
    void signalled.then(() => process.exit(130));
  };
  process.on('SIGINT', handler);
  process.on('SIGTERM', handler);
  return () => {
    process.off('SIGINT', handler);
    process.off('SIGTERM', handler);
  };
}

export interface Stats {
  n: number;
  p50: number | null;
  p99: number | null;
  max: number | null;
  mean: number | null;
}

export function stats(xs: number[]): Stats {
  if (xs.length === 0) return { n: 0, p50: null, p99: null, max: null, mean: null };
  const s = [...xs].sort((a, b) => a - b);
  const q = (p: number) => s[Math.min(s.length - 1, Math.max(0, Math.ceil(p * s.length) - 1))];
  return {
    n: s.length,
    p50: round(q(0.5)),
    p99: round(q(0.99)),
    max: round(s[s.length - 1]),
    mean: round(s.reduce((a, b) => a + b, 0) / s.length),
  };
}

export const round = (v: number, digits = 2) => Math.round(v * 10 ** digits) / 10 ** digits;

export const load1 = () => round(os.loadavg()[0]);

export function log(m: string): void {
  console.error(`[load ${new Date().toISOString().slice(11, 19)}] ${m}`);
}

/** Resident set size of a process in MiB, from /proc (null once it is gone). */
export function rssMiB(pid: number): number | null {
  try {
    const m = /VmRSS:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? round(Number(m[1]) / 1024, 1) : null;
  } catch {
    return null;
  }
}

/** utime + stime of a process in ms (clock ticks of 10 ms). */
export function cpuMs(pid: number): number {
  try {
    const f = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    const rest = f.slice(f.lastIndexOf(')') + 2).split(' ');
    return (Number(rest[11]) + Number(rest[12])) * 10;
  } catch {
    return 0;
  }
}

/** CPU of a PostgreSQL server: its postmaster and every child (backends, WAL writer, checkpointer …). */
export function postgresCpuMs(postmasterPid: number): number {
  let sum = cpuMs(postmasterPid);
  for (const d of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const f = fs.readFileSync(`/proc/${d}/stat`, 'utf8');
      if (Number(f.slice(f.lastIndexOf(')') + 2).split(' ')[1]) === postmasterPid) sum += cpuMs(Number(d));
    } catch {
      // gone meanwhile
    }
  }
  return sum;
}

/**
 * A client whose connection errors (e.g. the database dropped with `force` during cleanup) are
 * ignored rather than crashing the bench; the next query on it fails instead.
 */
export function pgClient(connectionString: string): pg.Client {
  const c = new pg.Client({ connectionString });
  c.on('error', () => undefined);
  return c;
}

/** Least-squares slope of y over x. */
export function slope(points: [number, number][]): number {
  const n = points.length;
  if (n < 2) return 0;
  const mx = points.reduce((a, p) => a + p[0], 0) / n;
  const my = points.reduce((a, p) => a + p[1], 0) / n;
  let num = 0;
  let den = 0;
  for (const [x, y] of points) {
    num += (x - mx) * (y - my);
    den += (x - mx) ** 2;
  }
  return den === 0 ? 0 : num / den;
}

export interface LoadDatabase {
  ownerUrl: string;
  appUrl: string;
  systemUrl: string;
  embedded: boolean;
  /** Pid of the embedded server's postmaster (null on DATABASE_URL). */
  postmasterPid: number | null;
  /** Drops the database and stops an embedded server this scenario started. */
  close(): Promise<void>;
}

/** Where an embedded server's log lines go: the file ORDO_BENCH_PG_LOG names, else nowhere. */
export function embeddedServerLog(): ((line: string) => void) | undefined {
  const file = process.env.ORDO_BENCH_PG_LOG;
  return file ? (line) => fs.appendFileSync(file, `${line}\n`) : undefined;
}

/**
 * A fresh, migrated database: on `serverUrl` (DATABASE_URL) when given, else on an embedded
 * PostgreSQL in a temporary directory (durable defaults: fsync and synchronous_commit on). On the
 * embedded server, `statements` preloads pg_stat_statements and `commitTimestamps` turns on
 * track_commit_timestamp (when each transaction committed: pg_xact_commit_timestamp).
 */
export async function freshDatabase(
  serverUrl: string | undefined,
  name: string,
  opts: { statements?: boolean; commitTimestamps?: boolean } = {},
): Promise<LoadDatabase> {
  let embedded: EmbeddedPostgresHandle | undefined;
  let tmp: string | undefined;
  if (!serverUrl) {
    tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'ordo-load-pg-'));
    // Traversable, so an embedded server running as the postgres user (when run as root) reaches its data.
    fs.chmodSync(tmp, 0o711);
    const port = 51000 + (process.pid % 3000);
    const log = embeddedServerLog();
    embedded = await startEmbeddedPostgres(tmp, { port, database: 'postgres', log });
    if (opts.statements || opts.commitTimestamps) {
      // Both settings take a restart of the server, once.
      const c = pgClient(embedded.ownerUrl);
      await c.connect();
      if (opts.commitTimestamps) await c.query(`alter system set track_commit_timestamp = on`);
      if (opts.statements) {
        // pg_stat_statements must be preloaded. With ORDO_BENCH_AUTO_EXPLAIN=<duration> auto_explain
        // too: the plans of statements that took longer, those inside functions included, with their
        // buffers, in the server's log (ORDO_BENCH_PG_LOG).
        const explainOver = process.env.ORDO_BENCH_AUTO_EXPLAIN;
        await c.query(
          `alter system set shared_preload_libraries = ${explainOver ? 'pg_stat_statements, auto_explain' : 'pg_stat_statements'}`,
        );
        await c.query(`alter system set pg_stat_statements.track_planning = on`);
        if (explainOver) {
          if (!/^\d+(us|ms|s)?$/.test(explainOver)) throw new Error(`ORDO_BENCH_AUTO_EXPLAIN: a duration, e.g. 5ms`);
          await c.query(`alter system set auto_explain.log_min_duration = '${explainOver}'`);
          for (const setting of ['log_nested_statements', 'log_analyze', 'log_buffers']) {
            await c.query(`alter system set auto_explain.${setting} = on`);
          }
        }
      }
      await c.end();
      await embedded.stop();
      embedded = await startEmbeddedPostgres(tmp, { port, database: 'postgres', log });
    }
    serverUrl = embedded.ownerUrl;
  }
  const dbName = `ordo_${name}_${process.pid}`;
  const admin = pgClient(serverUrl);
  await admin.connect();
  await admin.query(`drop database if exists ${dbName} with (force)`);
  await admin.query(`create database ${dbName}`);
  const u = new URL(serverUrl);
  u.pathname = `/${dbName}`;
  const ownerUrl = u.toString();
  const m = await migrate(ownerUrl);
  const close = track(async () => {
    await admin.query(`drop database if exists ${dbName} with (force)`).catch(() => undefined);
    await admin.end();
    await embedded?.stop();
    if (tmp) fs.rmSync(tmp, { recursive: true, force: true });
  });
  return {
    ownerUrl,
    appUrl: m.appUrl,
    systemUrl: m.systemUrl,
    embedded: embedded !== undefined,
    postmasterPid: tmp
      ? Number(fs.readFileSync(path.join(tmp, 'data', 'postmaster.pid'), 'utf8').split('\n')[0])
      : null,
    close,
  };
}

export interface OrdoProcess {
  child: ChildProcess;
  pid: number;
  url: string;
  output(): string;
  /** SIGTERM, SIGKILL after 15 s; resolves once the process has exited. */
  stop(): Promise<void>;
  kill(): Promise<void>;
}

/** Every Ordo process a scenario starts, so a failure still stops them all. */
export class Processes {
  readonly home: string;
  private readonly all: OrdoProcess[] = [];
  private readonly cleanup: () => Promise<void>;

  constructor(
    private readonly db: LoadDatabase,
    private readonly mainJs = path.resolve(__dirname, '../src/main.js'),
  ) {
    this.home = fs.mkdtempSync(path.join(os.tmpdir(), 'ordo-load-home-'));
    fs.chmodSync(this.home, 0o711);
    this.cleanup = track(async () => {
      await Promise.all(this.all.map((p) => p.stop()));
      fs.rmSync(this.home, { recursive: true, force: true });
    });
  }

  /**
   * Starts `dist/src/main.js` with the given roles (and extra environment, node flags); resolves
   * once it printed its URL and /readyz answers 200. All processes share one ORDO_HOME (signing keys).
   */
  async start(roles: string, env: Record<string, string> = {}, nodeArgs: string[] = []): Promise<OrdoProcess> {
    const child = spawn(process.execPath, [...nodeArgs, this.mainJs], {
      env: {
        PATH: process.env.PATH,
        HOST: '127.0.0.1',
        PORT: '0',
        LOG_LEVEL: 'error',
        DATABASE_URL: this.db.ownerUrl,
        ORDO_HOME: this.home,
        ORDO_ROLES: roles,
        ...env,
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => {
      out += d.toString();
      if (out.length > 200_000) out = out.slice(-100_000);
    });
    const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    const proc: OrdoProcess = {
      child,
      pid: child.pid!,
      url: '',
      output: () => out,
      async stop() {
        if (child.exitCode !== null || child.signalCode !== null) return;
        child.kill('SIGTERM');
        const t = setTimeout(() => child.kill('SIGKILL'), 15_000);
        await exited;
        clearTimeout(t);
      },
      async kill() {
        if (child.exitCode !== null || child.signalCode !== null) return;
        child.kill('SIGKILL');
        await exited;
      },
    };
    this.all.push(proc);
    const deadline = Date.now() + 60_000;
    for (;;) {
      const m = /API:\s+(http:\/\/127\.0\.0\.1:\d+)\/api\/v1/.exec(out);
      if (m) {
        proc.url = m[1];
        break;
      }
      if (child.exitCode !== null) throw new Error(`ordo (${roles}) exited with ${child.exitCode}:\n${out}`);
      if (Date.now() > deadline) throw new Error(`ordo (${roles}) did not start in time:\n${out}`);
      await sleep(50);
    }
    for (;;) {
      const r = await fetch(`${proc.url}/readyz`).catch(() => undefined);
      if (r?.status === 200) break;
      if (Date.now() > deadline) throw new Error(`ordo (${roles}) not ready:\n${out}`);
      await sleep(100);
    }
    return proc;
  }

  /** The first start's tenant, admin token and platform operator token (written by the api process). */
  credentials(): { tenantId: string; adminToken: string; platformToken: string } {
    return JSON.parse(fs.readFileSync(path.join(this.home, 'admin-credentials.json'), 'utf8')) as {
      tenantId: string;
      adminToken: string;
      platformToken: string;
    };
  }

  async stopAll(): Promise<void> {
    await this.cleanup();
  }
}

/** Publishes a DAG through the API; returns its version. */
export async function publishDag(
  url: string,
  creds: { tenantId: string; adminToken: string },
  def: DagDefinitionInput,
): Promise<number> {
  const r = await fetch(`${url}/api/v1/dags`, {
    method: 'POST',
    headers: authHeaders(creds),
    body: JSON.stringify(def),
  });
  if (r.status !== 201 && r.status !== 200) throw new Error(`publish ${def.id}: ${r.status} ${await r.text()}`);
  return ((await r.json()) as { version: number }).version;
}

export const authHeaders = (creds: { tenantId: string; adminToken: string }) => ({
  authorization: `Bearer ${creds.adminToken}`,
  'x-tenant-id': creds.tenantId,
  'content-type': 'application/json',
});

/** In-process run creation (bulk, one transaction per call) for scenarios that measure something else. */
export function runsClient(db: LoadDatabase): { runs: RunsService; close(): Promise<void> } {
  const database = new Database({ app: db.appUrl, system: db.systemUrl }, { poolSize: 4, applicationName: 'bench' });
  return { runs: new RunsService(database, new RunsRepository(), new DagsRepository()), close: () => database.close() };
}

/** What each step of a burst shape runs: its plugin and config (a no-op by default). */
export type ShapeStep = Omit<DagDefinitionInput['steps'][number], 'id' | 'dependsOn'>;

/** The engine benchmark's burst shapes: a 10-step chain and a diamond 1 → 8 → 1. */
export function chainDag(id: string, length = 10, step: ShapeStep = { plugin: 'noop' }): DagDefinitionInput {
  return {
    id,
    steps: Array.from({ length }, (_, i) => ({
      ...step,
      id: `s${String(i + 1).padStart(2, '0')}`,
      dependsOn: i === 0 ? [] : [`s${String(i).padStart(2, '0')}`],
    })),
  };
}

export function diamondDag(id: string, step: ShapeStep = { plugin: 'noop' }): DagDefinitionInput {
  const branches = Array.from({ length: 8 }, (_, i) => `b${i + 1}`);
  return {
    id,
    steps: [
      { ...step, id: 'start' },
      ...branches.map((b) => ({ ...step, id: b, dependsOn: ['start'] })),
      { ...step, id: 'join', dependsOn: branches },
    ],
  };
}

/** The burst's mix: 5 chains to 2 diamonds, interleaved. */
export const shapeOf = (k: number): 'chain' | 'diamond' => (k % 7 < 5 ? 'chain' : 'diamond');

/** Writes a scenario's JSON result; returns the file. */
export function writeResult(outDir: string, name: string, result: unknown): string {
  fs.mkdirSync(outDir, { recursive: true });
  const file = path.join(outDir, `${name}-${new Date().toISOString().replace(/[:.]/g, '-')}.json`);
  fs.writeFileSync(file, JSON.stringify(result, null, 2));
  return file;
}

export function machine(): Record<string, unknown> {
  return {
    cpus: os.cpus().length,
    cpuModel: os.cpus()[0]?.model,
    memGiB: round(os.totalmem() / 2 ** 30, 1),
    node: process.version,
  };
}

export interface LoadOptions {
  /** PostgreSQL server URL; unset → embedded. */
  serverUrl?: string;
  outDir: string;
}
