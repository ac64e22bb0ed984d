import { parseArgs } from 'node:util';
import { holdRow, runHold, writeHold } from './load-hold';
import { httpRow, runHttpLoad, writeHttp } from './load-http';
import { recoveryRow, runRecovery, writeRecovery } from './load-recovery';
import { runWorkers, workersRows, writeWorkers } from './load-workers';
import { runWs, writeWs, wsRow } from './load-ws';
import { cleanupOnSignals, load1, log, signalCleanup } from './support-load';

export const LOAD_SCENARIOS = ['load-http', 'load-hold', 'load-ws', 'load-workers', 'load-recovery'] as const;
type Scenario = (typeof LOAD_SCENARIOS)[number];

export const LOAD_HELP = `Load figures (separate Ordo processes started from dist/src/main.js, 127.0.0.1 only):

  npm run bench -- --only load               all five load scenarios
  npm run bench -- --only load-http,load-ws  some of them

  load-http      POST /api/v1/runs with autocannon against an api-only process: runs/s, latency p50/p99/p99.9,
                 non-2xx; per request: transactions, rows written, CPU of api, PostgreSQL and the load generator
  load-hold      10,000 runs held at once (one long noop step each): worker RSS sampled every second, min/max/slope
  load-ws        1,000 WebSocket subscribers each receiving every event of a set of runs: delivered/expected,
                 delivery latency p50/p99, api RSS
  load-workers   the engine burst workload (500 x 10-step chain + 200 diamonds) with 1, 2 and 4 worker processes
                 against one api,scheduler process: steps/s for each
  load-recovery  SIGKILL the worker running a step: kill -> attempt 2 claimed by another worker, against the bound
                 ORDO_LEASE_TTL_MS + ORDO_REAPER_INTERVAL_MS

Load options:
  --db <url>                 PostgreSQL server (owner) URL; default DATABASE_URL, else an embedded one per scenario
  --out <dir>                results directory (default bench/results); each scenario writes load-<name>-<time>.json
  --http-connections <n>     (default 50)
  --http-duration <s>        (default 20)
  --http-cpu-prof            profile the api process (V8 --cpu-prof) and print its top functions
  --hold-runs <n>            (default 10000)
  --hold-seconds <s>         sampling window while the runs are held (default 45)
  --hold-concurrency <n>     worker concurrency while holding (default 256: a worker holds at most 256 steps)
  --hold-sleep-ms <ms>       step sleep (default: longer than the window, every run held; shorter: runs turn over)
  --hold-max-old-space-mb <n>  cap the worker's V8 old space (tells lazy garbage collection from a leak)
  --ws-clients <n>           (default 1000)
  --ws-runs <n>              runs whose events every subscriber must receive (default 20, 3-step chains)
  --ws-run-interval-ms <ms>  pause between their creations (default 250; 0 = all at once)
  --workers <list>           worker process counts (default 1,2,4), concurrency 16 each
  --workers-repeats <n>      bursts per worker count (default 3; the median is reported)
  --recovery-trials <n>      (default 3)
  --lease-ttl-ms <ms>        ORDO_LEASE_TTL_MS of load-recovery (default 30000, as Ordo's)
  --reaper-interval-ms <ms>  ORDO_REAPER_INTERVAL_MS of load-recovery (default 5000, as Ordo's)`;

/** True when argv asks for load scenarios (`--only load…`). */
export function wantsLoad(argv: string[]): boolean {
  const i = argv.findIndex((a) => a === '--only' || a.startsWith('--only='));
  if (i < 0) return false;
  const v = argv[i].startsWith('--only=') ? argv[i].slice(7) : (argv[i + 1] ?? '');
  return v.split(',').some((s) => s === 'load' || s.startsWith('load-'));
}

/** Runs the load scenarios named by `--only`, prints one table row each and writes their JSON. */
export async function runLoadCli(argv: string[]): Promise<void> {
  const { values } = parseArgs({
    args: argv,
    options: {
      only: { type: 'string', default: 'load' },
      db: { type: 'string' },
      out: { type: 'string', default: 'bench/results' },
      'http-connections': { type: 'string', default: '50' },
      'http-duration': { type: 'string', default: '20' },
      'http-cpu-prof': { type: 'boolean', default: false },
      'hold-runs': { type: 'string', default: '10000' },
      'hold-seconds': { type: 'string', default: '45' },
      'hold-concurrency': { type: 'string', default: '256' },
      'hold-sleep-ms': { type: 'string' },
      'hold-max-old-space-mb': { type: 'string' },
      'ws-clients': { type: 'string', default: '1000' },
      'ws-runs': { type: 'string', default: '20' },
      'ws-run-interval-ms': { type: 'string', default: '250' },
      workers: { type: 'string', default: '1,2,4' },
      'workers-repeats': { type: 'string', default: '3' },
      'recovery-trials': { type: 'string', default: '3' },
      'lease-ttl-ms': { type: 'string', default: '30000' },
      'reaper-interval-ms': { type: 'string', default: '5000' },
      help: { type: 'boolean', default: false },
    },
  });
  if (values.help) {
    console.log(LOAD_HELP);
    return;
  }
  const asked = values.only.split(',').flatMap((s) => (s === 'load' ? [...LOAD_SCENARIOS] : [s]));
  const unknown = asked.filter((s) => !(LOAD_SCENARIOS as readonly string[]).includes(s));
  if (unknown.length)
    throw new Error(`unknown load scenario(s): ${unknown.join(', ')} (known: ${LOAD_SCENARIOS.join(', ')})`);
  const base = { serverUrl: values.db ?? process.env.DATABASE_URL, outDir: values.out };
  const rows: string[][] = [];
  const files: string[] = [];
  const release = cleanupOnSignals();
  try {
    await runScenarios();
  } catch (e) {
    const cleanup = signalCleanup();
    if (cleanup) {
      await cleanup;
      process.exit(130);
    }
    throw e;
  } finally {
    release();
  }
  async function runScenarios(): Promise<void> {
    for (const s of LOAD_SCENARIOS.filter((x: Scenario) => asked.includes(x))) {
      log(`${s}: start (load ${load1()})`);
      switch (s) {
        case 'load-http': {
          const r = await runHttpLoad({
            ...base,
            connections: Number(values['http-connections']),
            durationS: Number(values['http-duration']),
            cpuProf: values['http-cpu-prof'],
          });
          files.push(writeHttp(values.out, r));
          rows.push(httpRow(r));
          if (r.statementsPerRequest) {
            console.log(
              `\nstatements per created run (pg_stat_statements): ${r.perRequest.statements}, execution ${r.perRequest.statementMs} ms, planning ${r.perRequest.planMs} ms`,
            );
            for (const q of r.statementsPerRequest.slice(0, 20))
              console.log(
                `  ${q.calls.toFixed(2).padStart(6)} × exec ${q.ms.toFixed(3).padStart(7)} ms plan ${q.planMs.toFixed(3).padStart(7)} ms  ${q.query}`,
              );
          }
          if (r.cpuProfileTop) {
            console.log('\napi process, top self time:');
            for (const f of r.cpuProfileTop) console.log(`  ${f.selfPct.toFixed(1).padStart(5)} %  ${f.fn}`);
          }
          break;
        }
        case 'load-hold': {
          const r = await runHold({
            ...base,
            runs: Number(values['hold-runs']),
            holdSeconds: Number(values['hold-seconds']),
            concurrency: Number(values['hold-concurrency']),
            sleepMs: values['hold-sleep-ms'] === undefined ? undefined : Number(values['hold-sleep-ms']),
            maxOldSpaceMiB:
              values['hold-max-old-space-mb'] === undefined ? undefined : Number(values['hold-max-old-space-mb']),
          });
          files.push(writeHold(values.out, r));
          rows.push(holdRow(r));
          break;
        }
        case 'load-ws': {
          const r = await runWs({
            ...base,
            clients: Number(values['ws-clients']),
            runs: Number(values['ws-runs']),
            runIntervalMs: Number(values['ws-run-interval-ms']),
          });
          files.push(writeWs(values.out, r));
          rows.push(wsRow(r));
          break;
        }
        case 'load-workers': {
          const r = await runWorkers({
            ...base,
            workerCounts: values.workers.split(',').map(Number),
            repeats: Number(values['workers-repeats']),
            concurrency: 16,
          });
          files.push(writeWorkers(values.out, r));
          rows.push(...workersRows(r));
          break;
        }
        case 'load-recovery': {
          const r = await runRecovery({
            ...base,
            trials: Number(values['recovery-trials']),
            leaseTtlMs: Number(values['lease-ttl-ms']),
            reaperIntervalMs: Number(values['reaper-interval-ms']),
          });
          files.push(writeRecovery(values.out, r));
          rows.push(recoveryRow(r));
          break;
        }
      }
    }
  }
  console.log('\n| load figure | measured | target | load avg (1 min) |\n|---|---|---|---|');
  for (const r of rows) console.log(`| ${r.join(' | ')} |`);
  console.log(`\nresults: ${files.join(', ')}`);
}
