import fs from 'node:fs';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import {
  pgClient,
  authHeaders,
  cpuMs,
  postgresCpuMs,
  freshDatabase,
  load1,
  log,
  machine,
  Processes,
  publishDag,
  round,
  rssMiB,
  sleep,
  writeResult,
  type LoadOptions,
} from './support-load';

/** The part of autocannon's programmatic API this scenario uses (the package ships no types). */
interface AutocannonRequest {
  method?: string;
  path?: string;
  headers?: Record<string, string>;
  body?: string;
  setupRequest?: (req: AutocannonRequest) => AutocannonRequest;
}
interface AutocannonHistogram {
  average: number;
  mean: number;
  p50: number;
  p90: number;
  p99: number;
  p99_9: number;
  max: number;
  total: number;
}
interface AutocannonResult {
  duration: number;
  requests: AutocannonHistogram;
  latency: AutocannonHistogram;
  non2xx: number;
  errors: number;
  timeouts: number;
  '2xx': number;
  statusCodeStats: Record<string, { count: number }>;
}
type Autocannon = (opts: {
  url: string;
  connections: number;
  duration: number;
  requests: AutocannonRequest[];
}) => Promise<AutocannonResult>;

const autocannon = createRequire(__filename)('autocannon') as Autocannon;

export interface HttpLoadOptions extends LoadOptions {
  connections: number;
  durationS: number;
  /** Write a V8 CPU profile of the api process to <outDir>/cpuprof and summarise it. */
  cpuProf: boolean;
}

export interface HttpLoadResult {
  scenario: 'load-http';
  connections: number;
  durationS: number;
  runsCreated: number;
  runsPerS: number;
  latencyMs: { p50: number; p90: number; p99: number; p99_9: number; max: number; mean: number };
  non2xx: number;
  errors: number;
  timeouts: number;
  statusCodes: Record<string, number>;
  perRequest: {
    statements: number | null;
    statementMs: number | null;
    planMs: number | null;
    transactions: number;
    rowsInserted: number;
    rowsUpdated: number;
    apiCpuMs: number;
    postgresCpuMs: number | null;
    benchCpuMs: number;
  };
  /**
   * Runs/s the machine's cores could give if the api process, PostgreSQL and the load generator
   * used them fully at the measured CPU per request (null without the embedded server's CPU).
   */
  cpuBoundRunsPerS: number | null;
  apiRssMiB: { before: number | null; after: number | null };
  target: { runsPerS: number; p99Ms: number; runsPerSRatio: number; met: boolean };
  cpuProfileTop?: { fn: string; selfPct: number }[];
  /** pg_stat_statements over the measured window: calls and execution time per request. */
  statementsPerRequest?: { calls: number; ms: number; planMs: number; query: string }[];
  loadavg1: [number, number];
  machine: Record<string, unknown>;
  postgresEmbedded: boolean;
}

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
}

/** Self time per function of a .cpuprofile, top 25. */
function summariseProfile(file: string): { fn: string; selfPct: number }[] {
  const p = JSON.parse(fs.readFileSync(file, 'utf8')) as { nodes: ProfileNode[]; samples: number[] };
  const byId = new Map(p.nodes.map((n) => [n.id, n]));
  const counts = new Map<string, number>();
  for (const s of p.samples) {
    const n = byId.get(s);
    if (!n) continue;
    const url = n.callFrame.url.replace(/^.*node_modules\//, '').replace(/^.*\/dist\//, 'dist/');
    const key = `${n.callFrame.functionName || '(anonymous)'} ${url}:${n.callFrame.lineNumber + 1}`;
    counts.set(key, (counts.get(key) ?? 0) + 1);
  }
  return [...counts.entries()]
    .sort((a, b) => b[1] - a[1])
    .slice(0, 25)
    .map(([fn, c]) => ({ fn, selfPct: round((c / p.samples.length) * 100, 1) }));
}

/**
 * Run creation over HTTP: autocannon with `connections` connections POSTs /api/v1/runs, a fresh
 * runToken per request, for `durationS` seconds against an api-only process (no worker: the figure
 * is the API's). Reports runs/s, latency percentiles, non-2xx, and per request the database
 * transactions and rows written and the CPU of the api process, PostgreSQL and this process.
 */
export async function runHttpLoad(opts: HttpLoadOptions): Promise<HttpLoadResult> {
  const db = await freshDatabase(opts.serverUrl, 'load_http', { statements: true });
  const procs = new Processes(db);
  const profDir = path.resolve(opts.outDir, 'cpuprof');
  try {
    if (opts.cpuProf) fs.mkdirSync(profDir, { recursive: true });
    const before = opts.cpuProf ? new Set(fs.readdirSync(profDir)) : new Set<string>();
    const api = await procs.start(
      'api',
      {},
      opts.cpuProf ? ['--cpu-prof', `--cpu-prof-dir=${profDir}`, '--cpu-prof-interval=500'] : [],
    );
    const creds = procs.credentials();
    await publishDag(api.url, creds, { id: 'load', steps: [{ id: 'only', plugin: 'noop' }] });

    const stat = pgClient(db.ownerUrl);
    await stat.connect();
    const dbStats = async () =>
      (
        await stat.query<{ x: number; ins: number; upd: number }>(
          `select (xact_commit + xact_rollback)::float8 x, tup_inserted::float8 ins, tup_updated::float8 upd
           from pg_stat_database where datname = current_database()`,
        )
      ).rows[0];
    // Statement counts need pg_stat_statements preloaded (done for the embedded server).
    const statements = await stat.query('create extension if not exists pg_stat_statements').then(
      () => true,
      () => false,
    );
    const runCount = async () => (await stat.query<{ n: number }>('select count(*)::int n from run')).rows[0].n;

    // Warm-up: connections, prepared paths, JIT.
    let seq = 0;
    const requests: AutocannonRequest[] = [
      {
        method: 'POST',
        path: '/api/v1/runs',
        headers: authHeaders(creds),
        setupRequest: (req) => ({
          ...req,
          body: JSON.stringify({ dagId: 'load', inputs: {}, runToken: `r-${process.pid}-${seq++}` }),
        }),
      },
    ];
    log(`load-http: warm-up 3 s`);
    await autocannon({ url: api.url, connections: opts.connections, duration: 3, requests });
    await sleep(500);

    const runs0 = await runCount();
    if (statements) await stat.query('select pg_stat_statements_reset()');
    await stat.query('select pg_stat_clear_snapshot()');
    const s0 = await dbStats();
    const a0 = cpuMs(api.pid);
    const p0 = db.postmasterPid ? postgresCpuMs(db.postmasterPid) : 0;
    const b0 = process.cpuUsage();
    const rss0 = rssMiB(api.pid);
    const l0 = load1();
    log(`load-http: ${opts.connections} connections for ${opts.durationS} s (load ${l0})`);
    const r = await autocannon({ url: api.url, connections: opts.connections, duration: opts.durationS, requests });
    const l1 = load1();
    const b = process.cpuUsage(b0);
    const p1 = db.postmasterPid ? postgresCpuMs(db.postmasterPid) : 0;
    const a1 = cpuMs(api.pid);
    const rss1 = rssMiB(api.pid);
    // pg_stat_database is updated by backends at transaction end (and flushed within a second).
    await sleep(1500);
    await stat.query('select pg_stat_clear_snapshot()');
    const s1 = await dbStats();
    const runsCreated = (await runCount()) - runs0;
    const top = statements
      ? (
          await stat.query<{ calls: number; ms: number; plan_ms: number; query: string }>(
            `select calls::float8 calls, total_exec_time ms, total_plan_time plan_ms, left(regexp_replace(query, '\\s+', ' ', 'g'), 160) query
             from pg_stat_statements where dbid = (select oid from pg_database where datname = current_database())
               and query not like '%pg_stat%' and query not like 'select count(*)::int n from run%'
             order by calls desc, total_exec_time desc`,
          )
        ).rows
      : undefined;
    await stat.end();

    const n = Math.max(1, r['2xx']);
    const runsPerS = round(runsCreated / r.duration, 0);
    const statusCodes = Object.fromEntries(Object.entries(r.statusCodeStats).map(([k, v]) => [k, v.count]));
    const result: HttpLoadResult = {
      scenario: 'load-http',
      connections: opts.connections,
      durationS: r.duration,
      runsCreated,
      runsPerS,
      latencyMs: {
        p50: r.latency.p50,
        p90: r.latency.p90,
        p99: r.latency.p99,
        p99_9: r.latency.p99_9,
        max: r.latency.max,
        mean: r.latency.mean,
      },
      non2xx: r.non2xx,
      errors: r.errors,
      timeouts: r.timeouts,
      statusCodes,
      perRequest: {
        statements: top ? round(top.reduce((a, q) => a + q.calls, 0) / n) : null,
        statementMs: top ? round(top.reduce((a, q) => a + q.ms, 0) / n, 3) : null,
        planMs: top ? round(top.reduce((a, q) => a + q.plan_ms, 0) / n, 3) : null,
        transactions: round((s1.x - s0.x) / n),
        rowsInserted: round((s1.ins - s0.ins) / n),
        rowsUpdated: round((s1.upd - s0.upd) / n),
        apiCpuMs: round((a1 - a0) / n, 3),
        postgresCpuMs: db.postmasterPid ? round((p1 - p0) / n, 3) : null,
        benchCpuMs: round((b.user + b.system) / 1000 / n, 3),
      },
      cpuBoundRunsPerS: db.postmasterPid
        ? Math.round((os.cpus().length * 1000) / ((a1 - a0 + (p1 - p0)) / n + (b.user + b.system) / 1000 / n))
        : null,
      apiRssMiB: { before: rss0, after: rss1 },
      target: {
        runsPerS: 1000,
        p99Ms: 100,
        runsPerSRatio: round(runsPerS / 1000),
        met: runsPerS >= 1000 && r.latency.p99 < 100,
      },
      statementsPerRequest: top?.map((q) => ({
        calls: round(q.calls / n),
        ms: round(q.ms / n, 3),
        planMs: round(q.plan_ms / n, 3),
        query: q.query,
      })),
      loadavg1: [l0, l1],
      machine: machine(),
      postgresEmbedded: db.embedded,
    };
    log(
      `load-http: ${runsPerS} runs/s, p50 ${r.latency.p50} ms p99 ${r.latency.p99} ms p99.9 ${r.latency.p99_9} ms, non-2xx ${r.non2xx}`,
    );
    await api.stop();
    if (opts.cpuProf) {
      const prof = fs.readdirSync(profDir).find((f) => !before.has(f) && f.endsWith('.cpuprofile'));
      if (prof) {
        result.cpuProfileTop = summariseProfile(path.join(profDir, prof));
        log(`load-http: CPU profile ${path.join(profDir, prof)}`);
      }
    }
    return result;
  } finally {
    await procs.stopAll();
    await db.close();
  }
}

export function httpRow(r: HttpLoadResult): string[] {
  return [
    'runs created over HTTP (autocannon, 50 conn, api-only process)',
    `${r.runsPerS} runs/s (×${r.target.runsPerSRatio} of target); p50 / p99 / p99.9 ${r.latencyMs.p50} / ${r.latencyMs.p99} / ${r.latencyMs.p99_9} ms; non-2xx ${r.non2xx}; CPU per run: api ${r.perRequest.apiCpuMs} ms, PostgreSQL ${r.perRequest.postgresCpuMs ?? '?'} ms (all cores busy: ≈ ${r.cpuBoundRunsPerS ?? '?'} runs/s)`,
    '≥ 1,000 runs/s, p99 < 100 ms',
    `${r.loadavg1[0]} → ${r.loadavg1[1]}`,
  ];
}

export function writeHttp(outDir: string, r: HttpLoadResult): string {
  return writeResult(outDir, 'load-http', r);
}
