import type { CreateRunRequest } from '../src/modules/runs/runs.service';
import {
  pgClient,
  chainDag,
  diamondDag,
  freshDatabase,
  load1,
  log,
  machine,
  Processes,
  publishDag,
  round,
  rssMiB,
  runsClient,
  sleep,
  stats,
  untilAll,
  writeResult,
  type LoadOptions,
  type OrdoProcess,
} from './support-load';

export interface WorkersOptions extends LoadOptions {
  workerCounts: number[];
  repeats: number;
  concurrency: number;
}

export interface WorkersRound {
  workers: number;
  stepsPerS: number[];
  stepsPerSMedian: number;
  /** Median throughput relative to one worker process. */
  speedup: number;
  workerRssMiB: (number | null)[];
  /** The workers' busy connections (pg_stat_activity, every 50 ms during the bursts): share of samples per state/wait. */
  waits: { wait: string; pct: number }[];
  /** The statements those lock waits were in (share of all busy samples). */
  lockWaitStatements: { statement: string; pct: number }[];
  loadavg1: [number, number];
}

export interface WorkersResult {
  scenario: 'load-workers';
  workload: string;
  concurrencyPerWorker: number;
  tenantMaxInFlightPerWorker: number;
  rounds: WorkersRound[];
  machine: Record<string, unknown>;
  postgresEmbedded: boolean;
}

const shapeOf = (k: number) => (k % 7 < 5 ? 'chain' : 'diamond');

/**
 * Throughput with 1, 2, 4 … worker processes (ORDO_ROLES=worker) against one database and one
 * api,scheduler process, on the engine benchmark's burst: 500 runs of a 10-step chain and 200
 * diamonds (1 → 8 → 1), 7,000 noop steps submitted at once; steps/s from submit to the last
 * run's end notification (ordo_run_finished).
 */
export async function runWorkers(opts: WorkersOptions): Promise<WorkersResult> {
  const db = await freshDatabase(opts.serverUrl, 'load_workers');
  const procs = new Processes(db);
  const listener = pgClient(db.ownerUrl);
  const probe = pgClient(db.ownerUrl);
  const client = runsClient(db);
  const capPerWorker = 128;
  try {
    const api = await procs.start('api,scheduler');
    const creds = procs.credentials();
    await publishDag(api.url, creds, chainDag('chain'));
    await publishDag(api.url, creds, diamondDag('diamond'));
    const finishedAt = new Map<string, number>();
    await listener.connect();
    listener.on('notification', (n) => {
      if (n.payload) finishedAt.set(n.payload, performance.now());
    });
    await listener.query('listen ordo_run_finished');
    await probe.connect();

    let token = 0;
    const rounds: WorkersRound[] = [];
    for (const n of opts.workerCounts) {
      const env = {
        ORDO_WORKER_CONCURRENCY: String(opts.concurrency),
        ORDO_TENANT_MAX_IN_FLIGHT: String(capPerWorker * n),
      };
      const workers: OrdoProcess[] = await Promise.all(Array.from({ length: n }, () => procs.start('worker', env)));
      await sleep(1000);
      const rates: number[] = [];
      const waits = new Map<string, number>();
      const lockedOn = new Map<string, number>();
      let samples = 0;
      const l0 = load1();
      for (let rep = 0; rep < opts.repeats; rep++) {
        const reqs: CreateRunRequest[] = Array.from({ length: 700 }, (_, k) => ({
          dagId: shapeOf(k),
          inputs: {},
          runToken: `w${n}-${rep}-${k}-${token++}`,
          requestedBy: 'bench',
        }));
        const t0 = performance.now();
        const made = await client.runs.createRuns(creds.tenantId, reqs);
        const ids = made.map((r) => r.runId);
        const deadline = Date.now() + 180_000;
        let sampling = true;
        const sampler = (async () => {
          while (sampling) {
            const rows = (
              await probe.query<{ w: string; q: string }>(
                `select left(regexp_replace(query, '\\s+', ' ', 'g'), 100) q, case when state = 'idle in transaction' then 'idle in transaction (worker side)'
                             else coalesce(wait_event_type || ':' || wait_event, 'on CPU') end w
                 from pg_stat_activity where datname = current_database()
                   and application_name = 'ordo:worker:system' and state <> 'idle'`,
              )
            ).rows;
            for (const r of rows) {
              waits.set(r.w, (waits.get(r.w) ?? 0) + 1);
              if (r.w.startsWith('Lock:')) lockedOn.set(r.q, (lockedOn.get(r.q) ?? 0) + 1);
            }
            samples += rows.length;
            await sleep(50);
          }
        })();
        await untilAll(ids, (id) => finishedAt.has(id), deadline);
        sampling = false;
        await sampler;
        const done = ids.filter((id) => finishedAt.has(id));
        if (done.length < ids.length) throw new Error(`load-workers: ${ids.length - done.length} runs did not finish`);
        const end = Math.max(...done.map((id) => finishedAt.get(id)!));
        const steps = (
          await listener.query<{ n: number }>(
            `select count(*)::int n from attempt where status = 'succeeded' and run_id = any($1::uuid[])`,
            [ids],
          )
        ).rows[0].n;
        const rate = Math.round(steps / ((end - t0) / 1000));
        rates.push(rate);
        log(`load-workers: ${n} worker(s) #${rep}: ${rate} steps/s (${steps} steps)`);
        await sleep(500);
      }
      const rss = workers.map((w) => rssMiB(w.pid));
      await Promise.all(workers.map((w) => w.stop()));
      const median = stats(rates).p50!;
      rounds.push({
        workers: n,
        stepsPerS: rates,
        stepsPerSMedian: median,
        speedup: rounds.length ? round(median / rounds[0].stepsPerSMedian) : 1,
        workerRssMiB: rss,
        waits: [...waits.entries()]
          .sort((a, b) => b[1] - a[1])
          .slice(0, 8)
          .map(([wait, c]) => ({ wait, pct: round((c / Math.max(1, samples)) * 100, 1) })),
        lockWaitStatements: [...lockedOn.entries()]
          .sort((a, b) => b[1] - a[1])
          .slice(0, 5)
          .map(([statement, c]) => ({ statement, pct: round((c / Math.max(1, samples)) * 100, 1) })),
        loadavg1: [l0, load1()],
      });
    }
    return {
      scenario: 'load-workers',
      workload: '700 runs at once: 500 × 10-step chain + 200 diamonds 1 → 8 → 1 = 7,000 noop steps',
      concurrencyPerWorker: opts.concurrency,
      tenantMaxInFlightPerWorker: capPerWorker,
      rounds,
      machine: machine(),
      postgresEmbedded: db.embedded,
    };
  } finally {
    await listener.end().catch(() => undefined);
    await probe.end().catch(() => undefined);
    await client.close();
    await procs.stopAll();
    await db.close();
  }
}

export function workersRows(r: WorkersResult): string[][] {
  return r.rounds.map((x) => [
    `burst throughput, ${x.workers} worker process${x.workers > 1 ? 'es' : ''} (median of ${x.stepsPerS.length})`,
    `${x.stepsPerSMedian} steps/s (×${x.speedup} of 1 worker; ${x.stepsPerS.join(', ')}); worker connections: ${x.waits
      .slice(0, 3)
      .map((w) => `${w.wait} ${w.pct} %`)
      .join(', ')}`,
    '',
    `${x.loadavg1[0]} → ${x.loadavg1[1]}`,
  ]);
}

export const writeWorkers = (outDir: string, r: WorkersResult) => writeResult(outDir, 'load-workers', r);
