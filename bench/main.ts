import 'reflect-metadata';
import { fork, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { monitorEventLoopDelay, PerformanceObserver } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import v8 from 'node:v8';
import pg from 'pg';
import pino from 'pino';
import { loadConfig } from '../src/core/config/config';
import { Database } from '../src/core/database/database';
import { startEmbeddedPostgres, type EmbeddedPostgresHandle } from '../src/core/database/embedded';
import { migrate } from '../src/core/database/migrator';
import { canonicalHash } from '../src/core/json/canonical-json';
import { dagDefinition, type DagDefinitionInput } from '../src/modules/dags/dag-definition';
import { DagsRepository } from '../src/modules/dags/dags.repository';
import { RunsRepository } from '../src/modules/runs/runs.repository';
import { RunsService, type CreateRunRequest } from '../src/modules/runs/runs.service';
import { startOrdo, type RunningOrdo } from '../src/ordo';
import { conditionCost } from './conditions-bench';
import { CONSOLE_HELP, runConsoleBench, wantsConsole } from './console-bench';
import { runRetentionBench } from './retention-bench';
import { fanOutDag, mapRow, type MapRow } from './map-bench';
import { LOAD_HELP, runLoadCli, wantsLoad } from './load-cli';
import { runWeights } from './weights-bench';
import { runExternalWorkersBench, wantsExternalWorkers } from './workers-bench';
import {
  chainDag,
  cpuMs,
  diamondDag,
  embeddedServerLog,
  Processes,
  rssMiB,
  shapeOf,
  untilAll,
  type OrdoProcess,
} from './support-load';

const HELP = `Usage: npm run bench -- [options]

Ordo engine benchmark (the DAG workload of ../shared/bench-peers: burst, light, dispatch,
fairness, RSS, queries per step). Starts its own embedded PostgreSQL unless --db or
DATABASE_URL names a server (a fresh database is created on it and dropped afterwards).

Options:
  --db <url>               PostgreSQL server (owner) URL; default: DATABASE_URL, else embedded
  --concurrency <n>        worker concurrency (default 16)
  --tenant-cap <n>         ORDO_TENANT_MAX_IN_FLIGHT (default 128; the worker claims up to 8 x concurrency ahead)
  --shared-cap <n>         ORDO_TENANT_SHARED_IN_FLIGHT, the cap while two or more tenants have work (default 8;
                           0: the tenant cap always)
  --burst-repeats <n>      burst repeats (default 3; throughput is the median)
  --map-width <n>          map: elements of the 1 → n → 1 map run (default 1000)
  --map-repeats <n>        map runs, one after another (default 3; the figures are the median)
  --light-runs <n>         light-phase runs, one every --light-interval ms (default 50)
  --light-interval <ms>    (default 100)
  --backlog <n>            fairness: queued steps of the busy tenant (default 50000)
  --weights-backlog <n>    weights: queued steps of the tenant of weight 3 (default 45000; the tenant of weight 1
                           gets a third of it, so both stay saturated while the share is measured)
  --quiet-runs <n>         fairness: runs of the quiet tenant per measurement (default 100; p99 of 100 samples, not the maximum of 30)
  --fairness-rounds <n>    fairness: rounds of an idle and a loaded measurement (default 3); the headline p99s pool
                           every round's samples, and each round's ratio is reported too
  --control-clients <n>    fairness: sessions of the control load (default 2; 0: no control). After the rounds, the
                           quiet tenant is measured again, once per round, while a load that is not Ordo's keeps
                           the server busy instead of the busy tenant (bench/control-load.ts): what the host alone
                           does to the quiet tenant's latency under a load of that kind
  --control-work <n>       fairness control: numbers counted in each transaction (default 150000, about 10 ms of
                           one core here: statements that hold a core, as the busy tenant's batches do); 0: short
                           write transactions that mostly wait for their WAL flush
  --control-pause <ms>     fairness control: pause of each session between transactions (default 8)
  --months-ahead <n>       month partitions of run_event, attempt and span made ahead before measuring (default: the
                           3 that migrations make), to see what an install that keeps many months pays for them
  --weights-control-clients <n>  weights: sessions of the control load (default 2: the machine about as busy as
                           the weighted tenants keep it, both reported; 0: no control), with --control-work and
                           --control-pause
  --idle-seconds <s>       idle query-rate window (default 10)
  --only <list>            comma list of burst,map,light,fairness,weights,idle (default all), conditions (the cost of a step's
                           condition, no database); load or load-<name>: the load figures below; retention (10 million
                           events over 10 months, one month's partition dropped under writes; bench/retention-bench.ts)
  --worker-process         run the worker in a process of its own (dist/src/main.js, ORDO_ROLES=worker) instead of this
                           one, which then only creates runs and measures, like an api apart from the workers
                           (queries per step and idle queries/s then count this process only: not reported)
  --out <dir>              results directory (default bench/results)
  --help                   this text

Writes <out>/engine-<timestamp>.json and prints a table.

Environment: ORDO_BENCH_PROFILE=1 prints the wall time per statement text; ORDO_BENCH_HEAP=1 prints
where the allocations that outlive a young-generation collection come from while the fairness load
runs (sampled; these are what make scavenges long).`;

interface Stats {
  n: number;
  p50: number | null;
  p99: number | null;
  max: number | null;
  mean: number | null;
}

const round2 = (x: number) => Math.round(x * 100) / 100;

function stats(xs: number[]): Stats {
  if (xs.length === 0) return { n: 0, p50: null, p99: null, max: null, mean: null };
  const s = [...xs].sort((a, b) => a - b);
  const q = (p: number) => s[Math.min(s.length - 1, Math.max(0, Math.ceil(p * s.length) - 1))];
  return {
    n: s.length,
    p50: round2(q(0.5)),
    p99: round2(q(0.99)),
    max: round2(s[s.length - 1]),
    mean: round2(s.reduce((a, b) => a + b, 0) / s.length),
  };
}

const median = (xs: number[]) => stats(xs).p50;

/** The machine's CPU time so far from /proc/stat (in ticks): busy (all but idle and iowait) and total. */
function machineCpu(): { busy: number; total: number } {
  const f = fs.readFileSync('/proc/stat', 'utf8').split('\n')[0].trim().split(/\s+/).slice(1).map(Number);
  const total = f.reduce((a, b) => a + b, 0);
  return { busy: total - f[3] - f[4], total };
}
/** The share of the machine's cores busy since `from`, in per cent. */
const busySince = (from: { busy: number; total: number }) => {
  const to = machineCpu();
  return Math.round(((to.busy - from.busy) / Math.max(1, to.total - from.total)) * 1000) / 10;
};
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const now = () => performance.now();

/** Forks one of the bench's helper processes (a script next to this one) and waits for its first message, its 'ready'. */
async function forkReady(script: string, args: string[]): Promise<ChildProcess> {
  const child = fork(path.join(__dirname, script), args, { stdio: ['ignore', 'ignore', 'inherit', 'ipc'] });
  await new Promise<void>((resolve, reject) => {
    child.once('message', () => resolve());
    child.once('exit', () => reject(new Error(`${script} exited before it was ready`)));
  });
  child.removeAllListeners('exit');
  return child;
}

/** Counts every query any pg client of this process sends (engine, graphile-worker, driver). */
let queryCount = 0;
const origQuery = pg.Client.prototype.query;
/** With ORDO_BENCH_PROFILE=1: wall time per statement shape (first words of its text), printed at the end. */
const profile = process.env.ORDO_BENCH_PROFILE === '1' ? new Map<string, { n: number; ms: number }>() : null;
pg.Client.prototype.query = function (this: pg.Client, ...args: unknown[]) {
  queryCount++;
  const res = (origQuery as (...a: unknown[]) => unknown).apply(this, args);
  if (profile && res instanceof Promise) {
    const a0 = args[0] as string | { text?: string };
    const text = (typeof a0 === 'string' ? a0 : (a0?.text ?? '?')).replace(/\s+/g, ' ').trim().slice(0, 70);
    const t = performance.now();
    void res.then(
      () => {
        const e = profile.get(text) ?? { n: 0, ms: 0 };
        e.n++;
        e.ms += performance.now() - t;
        profile.set(text, e);
      },
      () => undefined,
    );
  }
  return res;
} as typeof pg.Client.prototype.query;

/**
 * With ORDO_BENCH_HEAP=1: samples, while the fairness load runs, the allocations that outlive a
 * young-generation collection (the ones that make scavenges long), and prints their top sites.
 */
async function startHeapSampling(): Promise<{ stop: () => Promise<void> } | null> {
  if (process.env.ORDO_BENCH_HEAP !== '1') return null;
  const { Session } = await import('node:inspector/promises');
  const s = new Session();
  s.connect();
  await s.post('HeapProfiler.startSampling', {
    samplingInterval: 16384,
    includeObjectsCollectedByMajorGC: true,
    includeObjectsCollectedByMinorGC: false,
  });
  return {
    stop: async () => {
      type Node = {
        callFrame: { functionName: string; url: string; lineNumber: number };
        selfSize: number;
        children: Node[];
      };
      const { profile } = (await s.post('HeapProfiler.stopSampling')) as unknown as { profile: { head: Node } };
      s.disconnect();
      const bySite = new Map<string, number>();
      const byStack = new Map<string, number>();
      const walk = (n: Node, stack: string[]) => {
        const f = n.callFrame;
        const site = `${f.functionName || '(anon)'} ${f.url.replace(/^.*\/(node_modules|dist)\//, '$1/')}:${f.lineNumber + 1}`;
        const st = [...stack, site];
        if (n.selfSize > 0) {
          bySite.set(site, (bySite.get(site) ?? 0) + n.selfSize);
          const key = st.slice(-6).join(' <- ');
          byStack.set(key, (byStack.get(key) ?? 0) + n.selfSize);
        }
        for (const c of n.children) walk(c, st);
      };
      walk(profile.head, []);
      const total = [...bySite.values()].reduce((a, b) => a + b, 0);
      console.log(`\nheap sampling: ${(total / 1e6).toFixed(1)} MB sampled that outlived a scavenge`);
      for (const [k, v] of [...bySite.entries()].sort((a, b) => b[1] - a[1]).slice(0, 25))
        console.log(`${(v / 1e6).toFixed(2)} MB  ${k}`);
      console.log('stacks:');
      for (const [k, v] of [...byStack.entries()].sort((a, b) => b[1] - a[1]).slice(0, 15))
        console.log(`${(v / 1e6).toFixed(2)} MB  ${k.split(' <- ').reverse().join('\n      <- ')}`);
    },
  };
}

/** What a failed run still has to undo (newest first): its database, embedded server, temporary directory. */
const cleanups: (() => Promise<unknown> | void)[] = [];

async function main(): Promise<void> {
  if (wantsLoad(process.argv.slice(2))) return runLoadCli(process.argv.slice(2));
  if (wantsExternalWorkers(process.argv.slice(2))) return runExternalWorkersBench(process.argv.slice(2));
  if (wantsConsole(process.argv.slice(2))) return runConsoleBench(process.argv.slice(2));
  const { values } = parseArgs({
    options: {
      db: { type: 'string' },
      concurrency: { type: 'string', default: '16' },
      'tenant-cap': { type: 'string', default: '128' },
      'shared-cap': { type: 'string', default: '8' },
      'burst-repeats': { type: 'string', default: '3' },
      'map-width': { type: 'string', default: '1000' },
      'map-repeats': { type: 'string', default: '3' },
      'light-runs': { type: 'string', default: '50' },
      'light-interval': { type: 'string', default: '100' },
      backlog: { type: 'string', default: '50000' },
      'weights-backlog': { type: 'string', default: '45000' },
      'quiet-runs': { type: 'string', default: '100' },
      'fairness-rounds': { type: 'string', default: '3' },
      'control-clients': { type: 'string', default: '2' },
      'control-work': { type: 'string', default: '150000' },
      'control-pause': { type: 'string', default: '8' },
      'weights-control-clients': { type: 'string', default: '2' },
      'months-ahead': { type: 'string' },
      'idle-seconds': { type: 'string', default: '10' },
      only: { type: 'string', default: 'burst,map,light,fairness,weights,idle' },
      out: { type: 'string', default: 'bench/results' },
      'worker-process': { type: 'boolean', default: false },
      help: { type: 'boolean', default: false },
    },
  });
  if (values.help) {
    console.log(`${HELP}\n\n${CONSOLE_HELP}\n\n${LOAD_HELP}`);
    return;
  }
  const only = new Set(values.only.split(','));
  const concurrency = Number(values.concurrency);
  const log = (m: string) => console.error(`[bench ${new Date().toISOString().slice(11, 19)}] ${m}`);

  // ---- conditions (no database) ----
  if (only.has('conditions')) {
    console.log('\n| condition (CEL) | mean µs | p99 µs |\n|---|---|---|');
    for (const c of conditionCost()) console.log(`| \`${c.expression}\` | ${c.meanUs} | ${c.p99Us} |`);
    if (only.size === 1) return;
  }

  // ---- database ----
  let embedded: EmbeddedPostgresHandle | undefined;
  let serverUrl = values.db ?? process.env.DATABASE_URL;
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'ordo-bench-'));
  // Traversable, so an embedded server running as the postgres user (when the bench runs as root) reaches its data.
  fs.chmodSync(tmp, 0o711);
  cleanups.unshift(() => fs.rmSync(tmp, { recursive: true, force: true }));
  if (!serverUrl) {
    embedded = await startEmbeddedPostgres(path.join(tmp, 'pg'), {
      port: 56000 + (process.pid % 3000),
      database: 'postgres',
      log: embeddedServerLog(),
    });
    serverUrl = embedded.ownerUrl;
    const e = embedded;
    cleanups.unshift(() => e.stop());
  }
  if (only.has('retention')) {
    const r = await runRetentionBench({ serverUrl, events: 10_000_000, months: 10, perRun: 100, log });
    console.log(`\n${JSON.stringify(r, null, 2)}`);
    if (only.size === 1) return;
  }
  /** CPU time (ms) used so far by the embedded server's processes (null with --db: other clients share it). */
  const pgCpuMs = (): number | null => {
    if (!embedded) return null;
    const pidFile = path.join(tmp, 'pg', 'data', 'postmaster.pid');
    const pm = Number(fs.readFileSync(pidFile, 'utf8').split('\n')[0]);
    const tick = 1000 / 100;
    let total = 0;
    for (const d of fs.readdirSync('/proc')) {
      if (!/^\d+$/.test(d)) continue;
      let stat: string;
      try {
        stat = fs.readFileSync(`/proc/${d}/stat`, 'utf8');
      } catch {
        continue;
      }
      const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      if (Number(d) === pm || Number(f[1]) === pm) total += (Number(f[11]) + Number(f[12])) * tick;
    }
    return total;
  };
  const dbName = `ordo_bench_${process.pid}`;
  const admin = new pg.Client({ connectionString: serverUrl });
  await admin.connect();
  await admin.query(`drop database if exists ${dbName}`);
  await admin.query(`create database ${dbName}`);
  if (process.env.ORDO_BENCH_DB_SETTINGS)
    for (const s of process.env.ORDO_BENCH_DB_SETTINGS.split(';'))
      await admin.query(`alter database ${dbName} set ${s}`);
  cleanups.unshift(async () => {
    const c = new pg.Client({ connectionString: serverUrl });
    await c.connect();
    await c.query(`drop database if exists ${dbName} with (force)`).finally(() => c.end());
  });
  const settings = (
    await admin.query<{ name: string; setting: string }>(
      `select name, setting from pg_settings where name in ('fsync', 'synchronous_commit', 'server_version', 'shared_buffers')`,
    )
  ).rows;
  const u = new URL(serverUrl);
  u.pathname = `/${dbName}`;
  const ownerUrl = u.toString();
  const m = await migrate(ownerUrl);
  const owner = new pg.Client({ connectionString: ownerUrl });
  await owner.connect();
  if (values['months-ahead'] !== undefined)
    await owner.query(`select ordo_partitions_ensure($1::integer)`, [Number(values['months-ahead'])]);
  /**
   * Starts the control load (bench/control-load.ts) with `clients` sessions, its tables made the
   * first time; the function it gives stops it and answers the transactions it committed.
   */
  const startControlLoad = async (clients: number): Promise<() => Promise<number>> => {
    await owner.query(
      `create table if not exists bench_control_counter (id integer primary key, n bigint not null default 0)`,
    );
    await owner.query(
      `insert into bench_control_counter (id) select g from generate_series(0, 9999) g on conflict do nothing`,
    );
    await owner.query(`create table if not exists bench_control_row (id bigserial primary key, k integer not null,
      pad text not null, at timestamptz not null default now())`);
    await owner.query(`create index if not exists bench_control_row_k on bench_control_row (k, at)`);
    const load = await forkReady('control-load.js', [
      ownerUrl,
      String(clients),
      values['control-work'],
      values['control-pause'],
    ]);
    const kill = () => void load.kill();
    cleanups.unshift(kill);
    return async () => {
      const committed = await new Promise<number>((resolve, reject) => {
        load.once('message', (x) => resolve(x as number));
        load.once('exit', () => reject(new Error('the control load exited without its count')));
        load.send('stop');
      });
      cleanups.splice(cleanups.indexOf(kill), 1);
      return committed;
    };
  };

  const config = loadConfig({
    ORDO_HOME: path.join(tmp, 'home'),
    PORT: '0',
    HOST: '127.0.0.1',
    LOG_LEVEL: process.env.ORDO_BENCH_LOG_LEVEL ?? 'silent',
    ORDO_ROLES: 'worker',
    ORDO_WORKER_CONCURRENCY: String(concurrency),
    ORDO_TENANT_MAX_IN_FLIGHT: values['tenant-cap'],
    ORDO_TENANT_SHARED_IN_FLIGHT: values['shared-cap'],
    // The in-process worker's phase profile, as for a worker process of its own.
    ORDO_ENGINE_PROFILE: process.env.ORDO_ENGINE_PROFILE,
    // Named prepared statements on or off (ORDO_DB_PREPARED_STATEMENTS), to measure what they save.
    ORDO_DB_PREPARED_STATEMENTS: process.env.ORDO_DB_PREPARED_STATEMENTS,
  });
  // The worker in this process (default), or in a process of its own (--worker-process): then this
  // process only creates runs and measures, as an api replica apart from the workers would.
  const separate = values['worker-process'];
  let ordo: RunningOrdo | undefined;
  let procs: Processes | undefined;
  let worker: OrdoProcess | undefined;
  let db: Database;
  if (separate) {
    const p = (procs = new Processes({
      ownerUrl,
      appUrl: m.appUrl,
      systemUrl: m.systemUrl,
      embedded: embedded !== undefined,
      postmasterPid: null,
      close: async () => undefined,
    }));
    cleanups.unshift(() => p.stopAll());
    worker = await p.start('worker', {
      ORDO_WORKER_CONCURRENCY: String(concurrency),
      ORDO_TENANT_MAX_IN_FLIGHT: values['tenant-cap'],
      ORDO_TENANT_SHARED_IN_FLIGHT: values['shared-cap'],
    });
    db = new Database({ app: m.appUrl, system: m.systemUrl }, { poolSize: 20, applicationName: 'ordo:bench' });
  } else {
    ordo = await startOrdo(config, pino({ level: 'silent' }), {
      appUrl: m.appUrl,
      systemUrl: m.systemUrl,
      ownerUrl,
    });
    db = ordo.database;
  }
  /** CPU time (ms) of the worker process, when it runs apart. */
  const workerCpuMs = () => (worker ? cpuMs(worker.pid) : 0);
  const runs = new RunsService(db, new RunsRepository(), new DagsRepository());

  await owner.query(
    `insert into tenant (id, name) values ('bench', 'bench'), ('busy', 'busy'), ('quiet', 'quiet'), ('heavy', 'heavy'), ('light', 'light')`,
  );
  const publish = async (tenantId: string, input: DagDefinitionInput) => {
    const def = dagDefinition.parse(input);
    const repo = new DagsRepository();
    await db.withTenant(tenantId, async (tx) => {
      const latest = await repo.lockDag(tx, def.id);
      await repo.insertVersion(tx, {
        dagId: def.id,
        version: latest + 1,
        contentHash: canonicalHash(def),
        definition: def,
        sourceFormat: 'json',
        owner: 'bench',
        signature: null,
        bundleHash: null,
      });
    });
  };
  await publish('bench', chainDag('chain'));
  await publish('bench', diamondDag('diamond'));
  await publish('bench', fanOutDag('fanout'));
  await publish('busy', { id: 'one', steps: [{ id: 'x', plugin: 'noop' }] });
  await publish('quiet', { id: 'one', steps: [{ id: 'x', plugin: 'noop' }] });
  await publish('heavy', { id: 'one', steps: [{ id: 'x', plugin: 'noop' }] });
  await publish('light', { id: 'one', steps: [{ id: 'x', plugin: 'noop' }] });

  // Run completion times as the engine announces them (NOTIFY at commit).
  const finishedAt = new Map<string, number>();
  const listener = new pg.Client({ connectionString: m.systemUrl });
  await listener.connect();
  listener.on('notification', (n) => {
    if (n.payload) finishedAt.set(n.payload, now());
  });
  await listener.query('listen ordo_run_finished');

  const result: Record<string, unknown> = {
    system: 'ordo',
    startedAt: new Date().toISOString(),
    machine: {
      cpus: os.cpus().length,
      cpuModel: os.cpus()[0]?.model,
      memGiB: Math.round((os.totalmem() / 2 ** 30) * 10) / 10,
      loadavgAtStart: os.loadavg(),
    },
    postgres: {
      embedded: embedded !== undefined,
      settings: Object.fromEntries(settings.map((s) => [s.name, s.setting])),
    },
    settings: {
      workerProcess: separate,
      concurrency,
      tenantMaxInFlight: Number(values['tenant-cap']),
      tenantSharedInFlight: Number(values['shared-cap']),
      tenantSharedWindowMs: config.ORDO_TENANT_SHARED_WINDOW_MS,
      leaseTtlMs: config.ORDO_LEASE_TTL_MS,
      node: process.version,
    },
  };
  let token = 0;
  const waitAll = (ids: string[], timeoutMs: number) =>
    untilAll(ids, (id) => finishedAt.has(id), Date.now() + timeoutMs);

  // ---- burst ----
  if (only.has('burst')) {
    const reps: Record<string, unknown>[] = [];
    for (let rep = 0; rep < Number(values['burst-repeats']); rep++) {
      const reqs: CreateRunRequest[] = Array.from({ length: 700 }, (_, k) => ({
        dagId: shapeOf(k),
        inputs: {},
        runToken: `b${rep}-${k}-${token++}`,
        requestedBy: 'bench',
      }));
      const q0 = queryCount;
      const cpu0 = process.cpuUsage();
      const wcpu0 = workerCpuMs();
      const pg0 = pgCpuMs();
      const load0 = os.loadavg()[0];
      const wal0 = (await owner.query<{ lsn: string }>('select pg_current_wal_lsn()::text as lsn')).rows[0].lsn;
      const t0 = now();
      const made = await runs.createRuns('bench', reqs);
      const submitMs = now() - t0;
      const ok = await waitAll(
        made.map((r) => r.runId),
        120_000,
      );
      const done = made.filter((r) => finishedAt.has(r.runId));
      const end = Math.max(...done.map((r) => finishedAt.get(r.runId)!));
      const elapsed = (end - t0) / 1000;
      const steps = (
        await owner.query<{ n: number }>(
          `select count(*)::int n from attempt where tenant_id = 'bench' and status = 'succeeded' and run_id = any($1::uuid[])`,
          [made.map((r) => r.runId)],
        )
      ).rows[0].n;
      const bad = (
        await owner.query<{ n: number }>(
          `select count(*)::int n from run where run_id = any($1::uuid[]) and status <> 'succeeded'`,
          [made.map((r) => r.runId)],
        )
      ).rows[0].n;
      const walBytes = Number(
        (
          await owner.query<{ n: string }>('select pg_wal_lsn_diff(pg_current_wal_lsn(), $1)::bigint::text as n', [
            wal0,
          ])
        ).rows[0].n,
      );
      const cpu = process.cpuUsage(cpu0);
      const nodeCpuMs = (cpu.user + cpu.system) / 1000 + (workerCpuMs() - wcpu0);
      const mk = done.map((r) => finishedAt.get(r.runId)! - t0);
      const row = {
        repeat: rep,
        completed: ok,
        runsNotSucceeded: bad,
        steps,
        submitMs: Math.round(submitMs),
        elapsedS: Math.round(elapsed * 1000) / 1000,
        stepsPerS: Math.round(steps / elapsed),
        makespanMs: stats(mk),
        // (The queries of this process: with --worker-process, not the worker's.)
        queriesPerStep: separate ? null : Math.round(((queryCount - q0) / Math.max(1, steps)) * 100) / 100,
        nodeCpuMsPerStep: Math.round((nodeCpuMs / Math.max(1, steps)) * 1000) / 1000,
        pgCpuMsPerStep: pg0 === null ? null : Math.round(((pgCpuMs()! - pg0) / Math.max(1, steps)) * 1000) / 1000,
        // WAL written per step (the whole server's: with --db, other databases' writes count too).
        walBytesPerStep: Math.round(walBytes / Math.max(1, steps)),
        loadavg1: [load0, os.loadavg()[0]],
      };
      log(
        `burst #${rep}: ${row.stepsPerS} steps/s (${steps} steps in ${row.elapsedS} s, submit ${row.submitMs} ms), ${row.queriesPerStep} queries/step, CPU per step ${row.nodeCpuMsPerStep} ms Node + ${row.pgCpuMsPerStep} ms PostgreSQL, ${row.walBytesPerStep} WAL bytes/step`,
      );
      reps.push(row);
      await sleep(500);
    }
    result.burst = { repeats: reps, stepsPerSMedian: median(reps.map((r) => r.stepsPerS as number)) };
  }

  // ---- map: one run of a 1 → n → 1 map DAG at a time ----
  if (only.has('map')) {
    const width = Number(values['map-width']);
    const items = Array.from({ length: width }, (_, i) => i);
    const reps: MapRow[] = [];
    for (let rep = 0; rep < Number(values['map-repeats']); rep++) {
      const t0 = now();
      const [made] = await runs.createRuns('bench', [
        { dagId: 'fanout', inputs: { items }, runToken: `m${rep}-${token++}`, requestedBy: 'bench' },
      ]);
      const ok = await waitAll([made.runId], 120_000);
      const status = (await owner.query<{ status: string }>('select status from run where run_id = $1', [made.runId]))
        .rows[0]?.status;
      const row = mapRow(rep, width, (finishedAt.get(made.runId) ?? now()) - t0, ok && status === 'succeeded');
      log(`map #${rep}: 1 → ${width} → 1 in ${row.makespanMs} ms, ${row.stepsPerS} steps/s (${status})`);
      reps.push(row);
      await sleep(500);
    }
    result.map = {
      repeats: reps,
      makespanMsMedian: median(reps.map((r) => r.makespanMs)),
      stepsPerSMedian: median(reps.map((r) => r.stepsPerS)),
    };
  }

  // ---- light ----
  if (only.has('light')) {
    await sleep(1000);
    const n = Number(values['light-runs']);
    const interval = Number(values['light-interval']);
    const submitted: { runId: string; shape: string; t: number; k: number; answered: number }[] = [];
    const pending: Promise<void>[] = [];
    const t0 = now();
    for (let k = 0; k < n; k++) {
      const d = t0 + k * interval - now();
      if (d > 0) await sleep(d);
      const t = now();
      pending.push(
        runs
          .createRun('bench', { dagId: shapeOf(k), inputs: {}, runToken: `l-${k}-${token++}`, requestedBy: 'bench' })
          .then((r) => {
            submitted.push({ runId: r.runId, shape: shapeOf(k), t, k, answered: now() - t });
          }),
      );
    }
    await Promise.all(pending);
    await waitAll(
      submitted.map((s) => s.runId),
      60_000,
    );
    const makespan = (s: (typeof submitted)[number]) => finishedAt.get(s.runId)! - s.t;
    const mk = (shape: string) => submitted.filter((s) => s.shape === shape && finishedAt.has(s.runId)).map(makespan);
    const chainIds = submitted.filter((s) => s.shape === 'chain').map((s) => s.runId);
    // Dispatch latency: predecessor's plugin returned → successor's plugin started (both worker clock).
    const disp = (
      await owner.query<{ ms: number }>(
        `select extract(epoch from (b.started_at - a.finished_at)) * 1000 as ms
       from attempt a join attempt b on b.tenant_id = a.tenant_id and b.run_id = a.run_id
        and b.step_id = 's' || lpad((substr(a.step_id, 2)::int + 1)::text, 2, '0')
       where a.run_id = any($1::uuid[]) and a.step_id <> 's10' and a.status = 'succeeded' and b.attempt = 1`,
        [chainIds],
      )
    ).rows.map((r) => Number(r.ms));
    const claim = (
      await owner.query<{ ms: number }>(
        `select extract(epoch from (b.claimed_at - a.finished_at)) * 1000 as ms
       from attempt a join attempt b on b.tenant_id = a.tenant_id and b.run_id = a.run_id
        and b.step_id = 's' || lpad((substr(a.step_id, 2)::int + 1)::text, 2, '0')
       where a.run_id = any($1::uuid[]) and a.step_id <> 's10' and a.status = 'succeeded' and b.attempt = 1`,
        [chainIds],
      )
    ).rows.map((r) => Number(r.ms));
    // Where a chain's makespan goes (database clock): its creating transaction's start to its first
    // step's claim, that claim to the first plugin start, the first start to the last plugin's end
    // (the steps run in the worker), and that end to the start of the transaction that ends the run.
    const parts = (
      await owner.query<{ run_id: string; claim: number; start: number; steps: number; end: number }>(
        `select r.run_id, extract(epoch from (f.claimed_at - r.created_at)) * 1000 as claim,
           extract(epoch from (f.started_at - f.claimed_at)) * 1000 as start,
           extract(epoch from (l.finished_at - f.started_at)) * 1000 as steps,
           extract(epoch from (r.finished_at - l.finished_at)) * 1000 as end
         from run r
         join attempt f on f.tenant_id = r.tenant_id and f.run_id = r.run_id and f.step_id = 's01' and f.attempt = 1
         join attempt l on l.tenant_id = r.tenant_id and l.run_id = r.run_id and l.step_id = 's10' and l.attempt = 1
         where r.run_id = any($1::uuid[])`,
        [chainIds],
      )
    ).rows;
    const part = (k: 'claim' | 'start' | 'steps' | 'end') => stats(parts.map((x) => Number(x[k])));
    // The slowest chain, taken apart: its place in the sequence, the creating call as this process
    // saw it, and the same parts as above (the rest of its makespan is its end's announcement
    // reaching this process).
    const slowest = submitted
      .filter((s) => s.shape === 'chain' && finishedAt.has(s.runId))
      .reduce<(typeof submitted)[number] | undefined>((a, s) => (!a || makespan(s) > makespan(a) ? s : a), undefined);
    const slowParts = parts.find((x) => x.run_id === slowest?.runId);
    result.light = {
      runs: n,
      chainPartsMs: {
        creationToFirstClaim: part('claim'),
        claimToFirstStart: part('start'),
        firstStartToLastEnd: part('steps'),
        lastEndToRunEndTx: part('end'),
      },
      intervalMs: interval,
      chainMakespanMs: stats(mk('chain')),
      diamondMakespanMs: stats(mk('diamond')),
      slowestChain: slowest && {
        index: slowest.k,
        makespanMs: round2(makespan(slowest)),
        creationCallMs: round2(slowest.answered),
        ...(slowParts && {
          creationToFirstClaimMs: round2(Number(slowParts.claim)),
          claimToFirstStartMs: round2(Number(slowParts.start)),
          firstStartToLastEndMs: round2(Number(slowParts.steps)),
          lastEndToRunEndTxMs: round2(Number(slowParts.end)),
        }),
      },
      dispatchLatencyMs: stats(disp),
      doneToClaimTxStartMs: stats(claim),
      loadavg1: os.loadavg()[0],
    };
    const cm = (result.light as { chainMakespanMs: Stats }).chainMakespanMs;
    (result.light as Record<string, unknown>).peakRssMbSoFar = Math.round(process.resourceUsage().maxRSS / 1024);
    log(
      `light: chain makespan p50 ${cm.p50} ms p99 ${cm.p99} ms; dispatch p50 ${stats(disp).p50} ms p99 ${stats(disp).p99} ms`,
    );
  }

  // ---- fairness ----
  if (only.has('fairness')) {
    // The quiet tenant's wake-ups as an idle process of its own receives them (see listen-probe.ts).
    const probe = await forkReady('listen-probe.js', [m.systemUrl, 'quiet']);
    cleanups.unshift(() => void probe.kill());
    const probeArrivals = () =>
      new Promise<number[]>((resolve) => {
        probe.once('message', (a) => resolve(a as number[]));
        probe.send('take');
      });
    await sleep(500);
    /** One quiet run's sample: when it was created (Unix ms), and durations in ms. */
    interface Sample {
      created: number;
      /** Its creating call, as the caller saw it. */
      call: number;
      /** From the start of its creating statement to its claim, to its creation's answer back here, to its wake-up at the probe. */
      claim: number;
      answered: number;
      probed: number | null;
      /** From its step's enqueueing (planned just before the creating statement) to its claim. */
      queue: number;
    }
    /** One quiet measurement: `quiet-runs` runs of the quiet tenant, one every 100 ms; its samples in creation order. */
    const quiet = async (label: string): Promise<Sample[]> => {
      // Each run's creating call (its transaction, committed), and when its answer was back here
      // (wall clock, to compare with the database's).
      const calls = new Map<string, { ms: number; at: number }>();
      for (let k = 0; k < Number(values['quiet-runs']); k++) {
        const c0 = now();
        const made = await runs.createRun('quiet', {
          dagId: 'one',
          inputs: {},
          runToken: `q-${label}-${k}-${token++}`,
          requestedBy: 'bench',
        });
        calls.set(made.runId, { ms: now() - c0, at: performance.timeOrigin + now() });
        await sleep(100);
      }
      const ids = [...calls.keys()];
      await waitAll(ids, 60_000);
      const arrivals = (await probeArrivals()).sort((a, b) => a - b);
      // Each run's wake-up at the probe: the first arrival after the start of its creating statement
      // (runs are created one at a time, 100 ms apart, each with one wake-up).
      const woken = (created: number) => {
        let lo = 0;
        let hi = arrivals.length;
        while (lo < hi) {
          const mid = (lo + hi) >> 1;
          if (arrivals[mid] < created) lo = mid + 1;
          else hi = mid;
        }
        return lo < arrivals.length && arrivals[lo] - created < 1000 ? arrivals[lo] - created : null;
      };
      const rows = (
        await owner.query<{ run_id: string; run: number; queue: number; created: number }>(
          `select a.run_id, extract(epoch from (a.claimed_at - r.created_at)) * 1000 as run,
             extract(epoch from (a.claimed_at - a.queued_at)) * 1000 as queue,
             extract(epoch from r.created_at) * 1000 as created from attempt a
         join run r on r.tenant_id = a.tenant_id and r.run_id = a.run_id where a.run_id = any($1::uuid[])`,
          [ids],
        )
      ).rows;
      return rows
        .map((r) => {
          const created = Number(r.created);
          const call = calls.get(r.run_id)!;
          return {
            created,
            call: call.ms,
            claim: Number(r.run),
            answered: call.at - created,
            probed: woken(created),
            queue: Number(r.queue),
          };
        })
        .sort((a, b) => a.created - b.created);
    };
    /** The samples as the JSON keeps them: [created, claim, answered, probed]. */
    const timeline = (xs: Sample[]) =>
      xs.map((x) => [
        round2(x.created),
        round2(x.claim),
        round2(x.answered),
        x.probed === null ? null : round2(x.probed),
      ]);
    const probedStats = (xs: Sample[]) => stats(xs.flatMap((x) => (x.probed === null ? [] : [x.probed])));
    const ratio = (a: Stats, b: Stats) => (a.p99 && b.p99 ? Math.round((b.p99 / a.p99) * 100) / 100 : null);
    const backlog = Number(values.backlog);
    const vacuuming = async () =>
      (
        await owner.query<{ n: number }>(
          `select count(*)::int n from pg_stat_activity where backend_type = 'autovacuum worker' and datname = current_database()`,
        )
      ).rows[0].n > 0;
    const walLsn = async () =>
      (await owner.query<{ lsn: string }>('select pg_current_wal_lsn()::text as lsn')).rows[0].lsn;
    const walSince = async (lsn: string) =>
      Number(
        (await owner.query<{ n: string }>('select pg_wal_lsn_diff(pg_current_wal_lsn(), $1)::bigint::text as n', [lsn]))
          .rows[0].n,
      );
    /** The server's CPU time, WAL and the machine's busy share over a window, summed over the windows measured. */
    interface Window {
      seconds: number;
      pgCpuMs: number | null;
      walBytes: number;
    }
    const noWindow = (): Window => ({ seconds: 0, pgCpuMs: 0, walBytes: 0 });
    /** Starts a window; the function it gives ends it, adds it to `sum` and returns the machine's busy share (%). */
    const openWindow = async () => {
      const [from, pg0, wal0, cpu0] = [now(), pgCpuMs(), await walLsn(), machineCpu()];
      return async (sum: Window) => {
        const busyPct = busySince(cpu0);
        sum.walBytes += await walSince(wal0);
        const pg1 = pgCpuMs();
        sum.pgCpuMs = pg0 === null || pg1 === null || sum.pgCpuMs === null ? null : sum.pgCpuMs + pg1 - pg0;
        sum.seconds += (now() - from) / 1000;
        return busyPct;
      };
    };
    const perS = (x: number, secs: number) => Math.round((x / Math.max(secs, 1e-9)) * 10) / 10;
    const settle = async () => {
      const settleBy = Date.now() + 60_000;
      while (Date.now() < settleBy && (await vacuuming())) await sleep(250);
      await sleep(1000);
    };
    const busyQueued = async () =>
      (await owner.query<{ n: number }>(`select count(*)::int n from queue_item where tenant_id = 'busy'`)).rows[0].n;
    // The event loop of this process (api, worker and driver) while the busy tenant drains: each
    // round's own (a histogram enabled again counts the time it was off as one delay).
    const loops: { p50: number; p99: number; max: number }[] = [];
    // Garbage-collection pauses of this process meanwhile.
    const gcPauses: number[] = [];
    const gcTimeline: number[][] = [];
    const gc = new PerformanceObserver((list) => {
      for (const e of list.getEntries()) {
        gcPauses.push(e.duration);
        gcTimeline.push([Math.round(performance.timeOrigin + e.startTime), round2(e.duration)]);
      }
    });
    // What the young generation promotes meanwhile: the old generation's growth between samples
    // (its shrinking at a full collection is not counted). Objects that outlive two scavenges end
    // there, and they are what makes a scavenge long.
    const oldSpaceUsed = () =>
      v8.getHeapSpaceStatistics().find((x) => x.space_name === 'old_space')?.space_used_size ?? 0;
    let oldGrowth = 0;
    // The server while loaded, and the busy steps claimed meanwhile.
    const loadedSum = noWindow();
    let loadedBusySteps = 0;
    const loadedBusyPct: number[] = [];
    const idles: Sample[] = [];
    const loadeds: Sample[] = [];
    const rounds: Record<string, unknown>[] = [];
    const nRounds = Number(values['fairness-rounds']);
    // Rounds of an idle measurement followed by a loaded one: the p99 of 100 samples is their
    // second largest, and alone it moved between ×1.2 and ×6 from run to run with the same build.
    for (let round = 1; round <= nRounds; round++) {
      // After a drain (the previous round's, or the burst's) the server is not idle yet: autovacuum
      // cleans the ended runs' rows. The idle measurement waits for it (at most a minute), then one
      // more second.
      await settle();
      const idle = await quiet(`idle${round}`);
      log(`fairness round ${round}/${nRounds}: queueing ${backlog} steps for tenant busy`);
      const busyIds: string[] = [];
      for (let i = 0; i < backlog; i += 5000) {
        const chunk = Array.from({ length: Math.min(5000, backlog - i) }, (_, k) => ({
          dagId: 'one',
          inputs: {},
          runToken: `busy-${i + k}-${token++}`,
          requestedBy: 'bench',
        }));
        busyIds.push(...(await runs.createRuns('busy', chunk)).map((r) => r.runId));
      }
      const queuedBefore = await busyQueued();
      const loop = monitorEventLoopDelay({ resolution: 1 });
      loop.enable();
      gc.observe({ entryTypes: ['gc'] });
      let oldLast = oldSpaceUsed();
      const oldSampler = setInterval(() => {
        const used = oldSpaceUsed();
        if (used > oldLast) oldGrowth += used - oldLast;
        oldLast = used;
      }, 20);
      const closeLoaded = await openWindow();
      const heap = round === 1 ? await startHeapSampling() : null;
      const loaded = await quiet(`loaded${round}`);
      await heap?.stop();
      loadedBusyPct.push(await closeLoaded(loadedSum));
      clearInterval(oldSampler);
      gc.disconnect();
      loop.disable();
      loops.push({
        p50: Math.round(loop.percentile(50) / 1e4) / 100,
        p99: Math.round(loop.percentile(99) / 1e4) / 100,
        max: Math.round(loop.max / 1e4) / 100,
      });
      const queuedAfter = await busyQueued();
      loadedBusySteps += queuedBefore - queuedAfter;
      idles.push(...idle);
      loadeds.push(...loaded);
      const [i, l] = [stats(idle.map((x) => x.claim)), stats(loaded.map((x) => x.claim))];
      rounds.push({
        busyQueuedAtStart: queuedBefore,
        busyQueuedAtEnd: queuedAfter,
        quietIdleClaimMs: i,
        quietLoadedClaimMs: l,
        p99Ratio: ratio(i, l),
        idleTimeline: timeline(idle),
        loadedTimeline: timeline(loaded),
      });
      log(
        `fairness round ${round}/${nRounds}: quiet claim p99 idle ${i.p99} ms, with ${queuedBefore} queued for busy ${l.p99} ms (×${ratio(i, l)})`,
      );
      log(`fairness round ${round}/${nRounds}: draining the busy tenant`);
      await waitAll(busyIds, 300_000);
    }
    // The control: the quiet tenant again, once per round, while a load that is not Ordo's keeps the
    // server busy (see control-load.ts), with the server's CPU time and WAL meanwhile.
    const controlClients = Number(values['control-clients']);
    const controls: Sample[] = [];
    const controlRounds: { p99: number | null; committedPerS: number; machineBusyPct: number }[] = [];
    const controlSum = noWindow();
    let controlCommitted = 0;
    if (controlClients > 0) {
      for (let round = 1; round <= nRounds; round++) {
        await settle();
        const stopLoad = await startControlLoad(controlClients);
        await sleep(1000);
        const secondsBefore = controlSum.seconds;
        const closeControl = await openWindow();
        const c = await quiet(`control${round}`);
        const busyPct = await closeControl(controlSum);
        const secs = controlSum.seconds - secondsBefore;
        const committed = await stopLoad();
        controlCommitted += committed;
        controls.push(...c);
        const cs = stats(c.map((x) => x.claim));
        controlRounds.push({ p99: cs.p99, committedPerS: Math.round(committed / secs), machineBusyPct: busyPct });
        log(
          `fairness control ${round}/${nRounds}: quiet claim p99 ${cs.p99} ms with the control load (${Math.round(committed / secs)} transactions/s)`,
        );
      }
    }
    const controlClaim = stats(controls.map((x) => x.claim));
    // Every round's samples together.
    const [idleClaim, loadedClaim] = [stats(idles.map((x) => x.claim)), stats(loadeds.map((x) => x.claim))];
    const [idleWait, loadedWait] = [stats(idles.map((x) => x.queue)), stats(loadeds.map((x) => x.queue))];
    result.fairness = {
      backlog,
      rounds,
      roundRatios: rounds.map((r) => r.p99Ratio),
      // The headline: every round's samples together (rounds × quiet-runs per phase).
      quietIdleClaimMs: idleClaim,
      quietLoadedClaimMs: loadedClaim,
      p99Ratio: ratio(idleClaim, loadedClaim),
      quietIdleQueueWaitMs: idleWait,
      quietLoadedQueueWaitMs: loadedWait,
      queueWaitP99Ratio: ratio(idleWait, loadedWait),
      quietIdleCreationMs: stats(idles.map((x) => x.call)),
      quietLoadedCreationMs: stats(loadeds.map((x) => x.call)),
      quietIdleCreationAnsweredMs: stats(idles.map((x) => x.answered)),
      quietLoadedCreationAnsweredMs: stats(loadeds.map((x) => x.answered)),
      // The same wake-ups at an idle listening process (see listen-probe.ts).
      quietIdleProbeWakeMs: probedStats(idles),
      quietLoadedProbeWakeMs: probedStats(loadeds),
      loadedBusyStepsPerS: Math.round(loadedBusySteps / loadedSum.seconds),
      loadedPgCpuMsPerBusyStep:
        loadedSum.pgCpuMs === null
          ? null
          : Math.round((loadedSum.pgCpuMs / Math.max(1, loadedBusySteps)) * 1000) / 1000,
      // The server while loaded: its processes' CPU time (ms a second) and WAL written (MB a second).
      loadedPgCpuMsPerS: loadedSum.pgCpuMs === null ? null : perS(loadedSum.pgCpuMs, loadedSum.seconds),
      loadedWalMBPerS: perS(loadedSum.walBytes / 1e6, loadedSum.seconds),
      // The machine's cores busy while loaded, each round (per cent of all cores).
      loadedMachineBusyPct: loadedBusyPct,
      ...(controlClients > 0 && {
        control: {
          clients: controlClients,
          work: Number(values['control-work']),
          pauseMs: Number(values['control-pause']),
          quietClaimMs: controlClaim,
          p99Ratio: ratio(idleClaim, controlClaim),
          rounds: controlRounds,
          committedPerS: Math.round(controlCommitted / controlSum.seconds),
          pgCpuMsPerS: controlSum.pgCpuMs === null ? null : perS(controlSum.pgCpuMs, controlSum.seconds),
          walMBPerS: perS(controlSum.walBytes / 1e6, controlSum.seconds),
          quietCreationAnsweredMs: stats(controls.map((x) => x.answered)),
          quietProbeWakeMs: probedStats(controls),
          timeline: timeline(controls),
        },
      }),
      loadedGcPausesMs: { ...stats(gcPauses), total: Math.round(gcPauses.reduce((a, b) => a + b, 0)) },
      // Each pause while loaded: its start (Unix ms) and length.
      loadedGcTimeline: gcTimeline,
      loadedOldGenerationGrowthMBPerS: perS(oldGrowth / 1e6, loadedSum.seconds),
      // The median round's p50, the worst round's p99 and max.
      loadedEventLoopDelayMs: {
        p50: median(loops.map((l) => l.p50)),
        p99: Math.max(...loops.map((l) => l.p99)),
        max: Math.max(...loops.map((l) => l.max)),
      },
      loadavg1: os.loadavg()[0],
    };
    await new Promise((resolve) => {
      probe.once('exit', resolve);
      probe.send('stop');
    });
    log(
      `fairness: quiet claim p99 idle ${idleClaim.p99} ms, loaded ${loadedClaim.p99} ms over ${nRounds} rounds (${idleClaim.n} samples each); queue wait p99 ${idleWait.p99} / ${loadedWait.p99} ms`,
    );
  }

  // ---- weights ----
  if (only.has('weights')) {
    const settle = async () => {
      const settleBy = Date.now() + 60_000;
      const vacuuming = async () =>
        (
          await owner.query<{ n: number }>(
            `select count(*)::int n from pg_stat_activity where backend_type = 'autovacuum worker' and datname = current_database()`,
          )
        ).rows[0].n > 0;
      while (Date.now() < settleBy && (await vacuuming())) await sleep(250);
      await sleep(1000);
    };
    const controlClients = Number(values['weights-control-clients']);
    const control = () => startControlLoad(controlClients);
    const busy = () => {
      const from = machineCpu();
      return () => busySince(from);
    };
    const w = await runWeights(
      {
        owner,
        runs,
        waitAll,
        settle,
        log,
        nextToken: () => token++,
        busy,
        control: controlClients > 0 ? control : null,
      },
      Number(values['weights-backlog']),
      Number(values['quiet-runs']),
    );
    result.weights = w;
    log(
      `weights: heavy share ${w.share} (expected ${w.expectedShare}, ${w.bothSaturated ? 'both saturated' : 'NOT both saturated'}); quiet claim p99 idle ${w.quietIdleClaimMs.p99} ms, loaded ${w.quietLoadedClaimMs.p99} ms (machine ${w.loadedBusyPct} % busy)` +
        (w.control ? `, control ${w.control.quietClaimMs.p99} ms (machine ${w.control.busyPct} % busy)` : ''),
    );
  }

  // ---- idle ----
  if (only.has('idle')) {
    await sleep(3000);
    const q0 = queryCount;
    const secs = Number(values['idle-seconds']);
    await sleep(secs * 1000);
    result.idle = {
      seconds: secs,
      queriesPerS: separate ? null : Math.round(((queryCount - q0) / secs) * 100) / 100,
      note: 'every query of this process: worker claims, heartbeats, graphile-worker',
    };
    log(`idle: ${(result.idle as { queriesPerS: number }).queriesPerS} queries/s`);
  }

  result.peakRssMb = Math.round(process.resourceUsage().maxRSS / 1024);
  if (worker) result.workerRssMbAtEnd = rssMiB(worker.pid);
  result.loadavgAtEnd = os.loadavg();
  result.finishedAt = new Date().toISOString();

  await listener.end();
  await ordo?.close();
  if (separate) await db.close();
  await procs?.stopAll();
  await owner.end();
  await admin.query(`drop database if exists ${dbName} with (force)`);
  await admin.end();
  await embedded?.stop();
  fs.rmSync(tmp, { recursive: true, force: true });

  fs.mkdirSync(values.out, { recursive: true });
  const file = path.join(values.out, `engine-${new Date().toISOString().replace(/[:.]/g, '-')}.json`);
  fs.writeFileSync(file, JSON.stringify(result, null, 2));
  printTable(result);
  if (profile) {
    console.log('\n| statement | n | total ms | mean ms |\n|---|---|---|---|');
    for (const [k, v] of [...profile.entries()].sort((a, b) => b[1].ms - a[1].ms).slice(0, 30))
      console.log(`| ${k} | ${v.n} | ${v.ms.toFixed(0)} | ${(v.ms / v.n).toFixed(3)} |`);
  }
  console.log(`\nresults: ${file}`);
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- the result object is assembled ad hoc above
function printTable(r: Record<string, any>): void {
  const rows: [string, string, string][] = [];
  if (r.burst) {
    rows.push(['burst: steps/s (median)', String(r.burst.stepsPerSMedian), '≥ 4000']);
    rows.push([
      'burst: queries per step',
      r.settings.workerProcess
        ? 'not counted (the worker runs apart)'
        : String((r.burst.repeats as { queriesPerStep: number }[]).map((x) => x.queriesPerStep).join(' / ')),
      '',
    ]);
  }
  if (r.map) {
    const w = (r.map.repeats as MapRow[])[0]?.width;
    rows.push([`map: 1 → ${w} → 1 makespan ms (median)`, String(r.map.makespanMsMedian), '']);
    rows.push([`map: 1 → ${w} → 1 steps/s (median)`, String(r.map.stepsPerSMedian), '']);
  }
  if (r.light) {
    rows.push([
      'light: 10-step chain makespan p50 / p99 ms',
      `${r.light.chainMakespanMs.p50} / ${r.light.chainMakespanMs.p99}`,
      '≤ 10 / ≤ 25',
    ]);
    const cp = r.light.chainPartsMs;
    if (cp)
      rows.push([
        'light: chain p50 ms: created → first claim / → first start / → last step end / → run-ending transaction',
        `${cp.creationToFirstClaim.p50} / ${cp.claimToFirstStart.p50} / ${cp.firstStartToLastEnd.p50} / ${cp.lastEndToRunEndTx.p50}`,
        '',
      ]);
    const sc = r.light.slowestChain;
    if (sc?.creationToFirstClaimMs !== undefined)
      rows.push([
        'light: slowest chain (run #, makespan ms): creating call / created → first claim / → first start / → last step end / → run-ending transaction ms',
        `#${sc.index}, ${sc.makespanMs}: ${sc.creationCallMs} / ${sc.creationToFirstClaimMs} / ${sc.claimToFirstStartMs} / ${sc.firstStartToLastEndMs} / ${sc.lastEndToRunEndTxMs}`,
        '',
      ]);
    rows.push(['light: diamond makespan p50 ms', String(r.light.diamondMakespanMs.p50), '']);
    rows.push([
      'dispatch latency p50 / p99 ms',
      `${r.light.dispatchLatencyMs.p50} / ${r.light.dispatchLatencyMs.p99}`,
      '',
    ]);
  }
  if (r.weights) {
    rows.push([
      `weights 3:1: heavy tenant's share of claims (${r.weights.claimed.join(' / ')} in ${r.weights.windowSeconds} s${r.weights.bothSaturated ? '' : ', not both saturated'})`,
      `${r.weights.share} (${r.weights.shareError >= 0 ? '+' : ''}${Math.round(r.weights.shareError * 1000) / 10} %)`,
      '0.75 ± 10 %',
    ]);
    rows.push([
      'weights 3:1: quiet claim p99 idle / loaded ms',
      `${r.weights.quietIdleClaimMs.p99} / ${r.weights.quietLoadedClaimMs.p99} (×${r.weights.p99Ratio})`,
      '≤ 2×',
    ]);
    if (r.weights.control)
      rows.push([
        `weights 3:1: quiet claim p99 under the control load instead, ms (machine ${r.weights.control.busyPct} % busy; ${r.weights.loadedBusyPct} % under the weighted tenants)`,
        `${r.weights.control.quietClaimMs.p99} (×${r.weights.control.p99Ratio})`,
        '',
      ]);
  }
  if (r.fairness) {
    rows.push([
      `fairness: quiet claim p99 idle / loaded ms (${r.fairness.rounds.length} rounds, ${r.fairness.quietIdleClaimMs.n} samples each)`,
      `${r.fairness.quietIdleClaimMs.p99} / ${r.fairness.quietLoadedClaimMs.p99} (×${r.fairness.p99Ratio})`,
      '≤ 2×',
    ]);
    rows.push([
      'fairness: each round alone, p99 loaded / idle',
      r.fairness.roundRatios.map((x: number) => `×${x}`).join(', '),
      '',
    ]);
    rows.push([
      'fairness: quiet claim p50 idle / loaded ms',
      `${r.fairness.quietIdleClaimMs.p50} / ${r.fairness.quietLoadedClaimMs.p50}`,
      '',
    ]);
    rows.push([
      `fairness: busy steps/s while loaded (shared cap ${r.settings.tenantSharedInFlight}), PostgreSQL CPU ms per busy step`,
      `${r.fairness.loadedBusyStepsPerS}, ${r.fairness.loadedPgCpuMsPerBusyStep ?? 'not measured (--db)'}`,
      '',
    ]);
    if (r.fairness.loadedWalMBPerS !== undefined)
      rows.push([
        "fairness: while loaded: the server's CPU ms/s, WAL MB/s; the machine's cores busy % by round",
        `${r.fairness.loadedPgCpuMsPerS ?? 'not measured (--db)'}, ${r.fairness.loadedWalMBPerS}; ${r.fairness.loadedMachineBusyPct.join(', ')}`,
        '',
      ]);
    if (r.fairness.control) {
      const c = r.fairness.control;
      rows.push([
        `fairness control (a load that is not Ordo's instead of the busy tenant: ${c.clients} sessions, ${c.work} numbers counted a transaction, ${c.pauseMs} ms apart): quiet claim p99 idle / control ms`,
        `${r.fairness.quietIdleClaimMs.p99} / ${c.quietClaimMs.p99} (×${c.p99Ratio}); rounds ${c.rounds.map((x: { p99: number }) => x.p99).join(', ')} ms`,
        '',
      ]);
      rows.push([
        "fairness control meanwhile: transactions/s; the server's CPU ms/s, WAL MB/s; the machine's cores busy % by round",
        `${c.committedPerS}; ${c.pgCpuMsPerS ?? 'not measured (--db)'}, ${c.walMBPerS}; ${c.rounds.map((x: { machineBusyPct: number }) => x.machineBusyPct).join(', ')}`,
        '',
      ]);
    }
    rows.push([
      'fairness: quiet queue wait (enqueued → claimed) p99 idle / loaded ms',
      `${r.fairness.quietIdleQueueWaitMs.p99} / ${r.fairness.quietLoadedQueueWaitMs.p99} (×${r.fairness.queueWaitP99Ratio})`,
      '',
    ]);
    rows.push([
      r.settings.workerProcess
        ? 'fairness: event-loop delay of the bench process (runs created here; the worker runs apart) while loaded p50 / p99 / max ms (worst round for p99, max)'
        : 'fairness: event-loop delay of the api + worker process while loaded p50 / p99 / max ms (worst round for p99, max)',
      `${r.fairness.loadedEventLoopDelayMs.p50} / ${r.fairness.loadedEventLoopDelayMs.p99} / ${r.fairness.loadedEventLoopDelayMs.max}`,
      '',
    ]);
    rows.push([
      'fairness: quiet run creation (the call) p50 / p99 idle, loaded ms',
      `${r.fairness.quietIdleCreationMs.p50} / ${r.fairness.quietIdleCreationMs.p99}, ${r.fairness.quietLoadedCreationMs.p50} / ${r.fairness.quietLoadedCreationMs.p99}`,
      '',
    ]);
    if (r.fairness.quietIdleCreationAnsweredMs)
      rows.push([
        'fairness: of the claim latency, the creating statement (start → answer back) p50 / p99 idle, loaded ms',
        `${r.fairness.quietIdleCreationAnsweredMs.p50} / ${r.fairness.quietIdleCreationAnsweredMs.p99}, ${r.fairness.quietLoadedCreationAnsweredMs.p50} / ${r.fairness.quietLoadedCreationAnsweredMs.p99}`,
        '',
      ]);
    if (r.fairness.quietIdleProbeWakeMs)
      rows.push([
        "fairness: of the claim latency, the wake-up at an idle listening process (statement's start → notification there) p50 / p99 idle, loaded ms",
        `${r.fairness.quietIdleProbeWakeMs.p50} / ${r.fairness.quietIdleProbeWakeMs.p99}, ${r.fairness.quietLoadedProbeWakeMs.p50} / ${r.fairness.quietLoadedProbeWakeMs.p99}`,
        '',
      ]);
    rows.push([
      'fairness: GC pauses of that process while loaded: count / max / total ms',
      `${r.fairness.loadedGcPausesMs.n} / ${r.fairness.loadedGcPausesMs.max} / ${r.fairness.loadedGcPausesMs.total}`,
      '',
    ]);
    if (r.fairness.loadedOldGenerationGrowthMBPerS !== undefined)
      rows.push([
        'fairness: old-generation growth of that process while loaded (what scavenges promote) MB/s',
        String(r.fairness.loadedOldGenerationGrowthMBPerS),
        '',
      ]);
  }
  if (r.idle)
    rows.push([
      'idle queries/s',
      r.settings.workerProcess ? 'not counted (the worker runs apart)' : String(r.idle.queriesPerS),
      'a few',
    ]);
  if (r.settings.workerProcess) {
    rows.push(['worker process', 'apart (--worker-process)', '']);
    rows.push([
      'RSS MB of the worker at the end / peak of the bench process',
      `${r.workerRssMbAtEnd} / ${r.peakRssMb}`,
      '',
    ]);
  } else rows.push(['peak RSS MB (worker + driver)', String(r.peakRssMb), '']);
  rows.push(['load average 1/5/15 at end', r.loadavgAtEnd.map((x: number) => x.toFixed(2)).join(' / '), '']);
  console.log('\n| metric | ordo | target |\n|---|---|---|');
  for (const [a, b, c] of rows) console.log(`| ${a} | ${b} | ${c} |`);
}

main().catch(async (e: unknown) => {
  console.error(e);
  for (const undo of cleanups) await Promise.resolve(undo()).catch(() => undefined);
  process.exit(1);
});
