import {
  pgClient,
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
  slope,
  writeResult,
  type LoadOptions,
} from './support-load';

export interface HoldOptions extends LoadOptions {
  runs: number;
  holdSeconds: number;
  concurrency: number;
  /** Step sleep; default: longer than the window, so every run stays held. */
  sleepMs?: number;
  /** Caps the worker's V8 old space (MiB): a bounded RSS under the cap tells lazy collection from a leak. */
  maxOldSpaceMiB?: number;
}

export interface HoldSample {
  t: number;
  workerRssMiB: number | null;
  apiRssMiB: number | null;
  runsNotTerminal: number;
  stepsLeased: number;
  loadavg1: number;
}

export interface HoldResult {
  scenario: 'load-hold';
  runs: number;
  createSeconds: number;
  workerConcurrency: number;
  stepSleepMs: number;
  workerMaxOldSpaceMiB: number | null;
  holdSeconds: number;
  workerRssMiB: { atStart: number | null; min: number; max: number; slopeMiBPerMin: number };
  apiSchedulerRssMiB: { min: number; max: number };
  runsSucceededDuringWindow: number;
  runsNotTerminal: { min: number; max: number };
  stepsLeasedByWorker: { min: number; max: number };
  samples: HoldSample[];
  loadavg1: [number, number];
  machine: Record<string, unknown>;
  postgresEmbedded: boolean;
}

/**
 * 10,000 runs held at once: each run is one noop step sleeping longer than the window. One worker
 * process (concurrency `concurrency`, the tenant cap lifted) runs as many as it may and leases its
 * look-ahead; the rest stay queued in PostgreSQL. While every run is held, the worker's RSS is
 * sampled every second (with the number of non-terminal runs and of leased steps).
 */
export async function runHold(opts: HoldOptions): Promise<HoldResult> {
  const db = await freshDatabase(opts.serverUrl, 'load_hold');
  const procs = new Processes(db);
  const owner = pgClient(db.ownerUrl);
  const client = runsClient(db);
  try {
    const api = await procs.start('api,scheduler');
    const creds = procs.credentials();
    const sleepMs = opts.sleepMs ?? (opts.holdSeconds + 600) * 1000;
    await publishDag(api.url, creds, {
      id: 'hold',
      steps: [{ id: 'wait', plugin: 'noop', with: { sleepMs }, timeout: sleepMs + 60_000 }],
    });
    const worker = await procs.start(
      'worker',
      { ORDO_WORKER_CONCURRENCY: String(opts.concurrency), ORDO_TENANT_MAX_IN_FLIGHT: '100000' },
      opts.maxOldSpaceMiB ? [`--max-old-space-size=${opts.maxOldSpaceMiB}`] : [],
    );
    await owner.connect();
    const rssStart = rssMiB(worker.pid);
    const l0 = load1();
    const t0 = performance.now();
    for (let i = 0; i < opts.runs; i += 1000) {
      await client.runs.createRuns(
        creds.tenantId,
        Array.from({ length: Math.min(1000, opts.runs - i) }, (_, k) => ({
          dagId: 'hold',
          inputs: {},
          runToken: `hold-${i + k}`,
          requestedBy: 'bench',
        })),
      );
    }
    const createSeconds = round((performance.now() - t0) / 1000);
    log(`load-hold: ${opts.runs} runs created in ${createSeconds} s; letting the worker fill its slots`);
    const counts = async () =>
      (
        await owner.query<{ open: number; leased: number }>(
          `select (select count(*)::int from run where status not in ('succeeded', 'failed', 'cancelled')) open,
                  (select count(*)::int from queue_item where state = 'leased') leased`,
        )
      ).rows[0];
    const fillDeadline = Date.now() + 60_000;
    // A worker holds at most min(256, 8 × concurrency) steps, running and claimed ahead (worker.service.ts).
    const holdable = Math.min(256, 8 * opts.concurrency, opts.runs);
    while ((await counts()).leased < holdable && Date.now() < fillDeadline) await sleep(250);
    const samples: HoldSample[] = [];
    const s0 = performance.now();
    for (let i = 0; i < opts.holdSeconds; i++) {
      const next = s0 + (i + 1) * 1000;
      const c = await counts();
      samples.push({
        t: round((performance.now() - s0) / 1000, 1),
        workerRssMiB: rssMiB(worker.pid),
        apiRssMiB: rssMiB(api.pid),
        runsNotTerminal: c.open,
        stepsLeased: c.leased,
        loadavg1: load1(),
      });
      await sleep(Math.max(0, next - performance.now()));
    }
    const rss = samples.map((s) => s.workerRssMiB ?? 0);
    const api1 = samples.map((s) => s.apiRssMiB ?? 0);
    const result: HoldResult = {
      scenario: 'load-hold',
      runs: opts.runs,
      createSeconds,
      workerConcurrency: opts.concurrency,
      stepSleepMs: sleepMs,
      workerMaxOldSpaceMiB: opts.maxOldSpaceMiB ?? null,
      holdSeconds: opts.holdSeconds,
      workerRssMiB: {
        atStart: rssStart,
        min: Math.min(...rss),
        max: Math.max(...rss),
        slopeMiBPerMin: round(slope(samples.map((s) => [s.t / 60, s.workerRssMiB ?? 0]))),
      },
      apiSchedulerRssMiB: { min: Math.min(...api1), max: Math.max(...api1) },
      runsSucceededDuringWindow: (
        await owner.query<{ n: number }>(`select count(*)::int n from run where status = 'succeeded'`)
      ).rows[0].n,
      runsNotTerminal: {
        min: Math.min(...samples.map((s) => s.runsNotTerminal)),
        max: Math.max(...samples.map((s) => s.runsNotTerminal)),
      },
      stepsLeasedByWorker: {
        min: Math.min(...samples.map((s) => s.stepsLeased)),
        max: Math.max(...samples.map((s) => s.stepsLeased)),
      },
      samples,
      loadavg1: [l0, load1()],
      machine: machine(),
      postgresEmbedded: db.embedded,
    };
    log(
      `load-hold: worker RSS ${result.workerRssMiB.min}–${result.workerRssMiB.max} MiB, slope ${result.workerRssMiB.slopeMiBPerMin} MiB/min; ${result.runsNotTerminal.min} runs held, ${result.stepsLeasedByWorker.max} steps leased`,
    );
    return result;
  } finally {
    await owner.end().catch(() => undefined);
    await client.close();
    await procs.stopAll();
    await db.close();
  }
}

export function holdRow(r: HoldResult): string[] {
  return [
    `${r.runs} runs held (worker concurrency ${r.workerConcurrency}, step sleep ${r.stepSleepMs / 1000} s), worker RSS sampled 1/s for ${r.holdSeconds} s`,
    `min ${r.workerRssMiB.min} / max ${r.workerRssMiB.max} MiB, slope ${r.workerRssMiB.slopeMiBPerMin} MiB/min; ${r.runsNotTerminal.min} runs non-terminal throughout, ${r.stepsLeasedByWorker.min}–${r.stepsLeasedByWorker.max} steps leased`,
    'steady RSS',
    `${r.loadavg1[0]} → ${r.loadavg1[1]}`,
  ];
}

export const writeHold = (outDir: string, r: HoldResult) => writeResult(outDir, 'load-hold', r);
