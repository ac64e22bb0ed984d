import { fork, type ChildProcess } from 'node:child_process';
import { parseArgs } from 'node:util';
import { join } from 'node:path';
import type { TransportKind } from '../sdk/worker/src';
import type { ExtWorkerMessage } from './ext-worker-process';
import {
  authHeaders,
  chainDag,
  cleanupOnSignals,
  cpuMs,
  diamondDag,
  freshDatabase,
  load1,
  log,
  machine,
  pgClient,
  postgresCpuMs,
  Processes,
  publishDag,
  round,
  runsClient,
  shapeOf,
  sleep,
  stats,
  writeResult,
  type Stats,
} from './support-load';

export const EXT_WORKERS_HELP = `External workers (--only ext-workers): SDK workers (sdk/worker) in child processes against one Ordo
process (api, worker and scheduler roles, dist/src/main.js); every step is a queue step whose handler does nothing:
  throughput  tasks/s through 4 SDK workers, over the WebSocket channel and by long-poll, for each shape of run:
              one (a one-step DAG per task: a run created and ended per task) and burst (the engine burst's
              DAGs, 5 chains of 10 to 2 diamonds 1 → 8 → 1: ten tasks a run); with the transactions and the pool's
              dispatches (orchestrator_task_dispatches_total) a task
  latency     dispatch latency, task opened (worker_task.created_at) → handler start, and run created → handler start,
              p50/p99 of runs started one at a time, by long-poll and by WebSocket; and of as many two-step chains,
              one at a time, the first step's no-op handler → its successor's handler start, and the successor's
              task opened (the start of the result transaction that made it ready) → its handler start; and
              from the commit of the transaction that opened the task (for a successor: the commit that made
              it ready) → handler start (embedded server: track_commit_timestamp); and the dispatches a task
  idle        transactions/s (pg_stat_database xact_commit delta) of 1,000 idle long-polling workers, beside the same
              window with no worker
Options:
  --db <url>                 PostgreSQL server URL (default DATABASE_URL, else embedded)
  --out <dir>                results directory (default bench/results; writes ext-workers-<time>.json)
  --ext-tasks <n>            throughput: tasks per transport and shape (default 7000: the built-in burst's 700 runs
                             of ten steps, so the two figures are measured over the same work)
  --ext-shapes <list>        throughput: comma list of one,burst (default both)
  --ext-concurrency <n>      throughput: maxConcurrent of each of the 4 workers (default 16)
  --ext-repeats <n>          throughput: repeats of each phase with the same workers (default 3; the figure is the
                             median, as the engine burst's)
  --ext-latency-runs <n>     latency: runs per transport (default 200)
  --ext-idle-workers <n>     idle: workers (default 1000)
  --ext-idle-seconds <s>     idle: window (default 30)
Environment: ORDO_BENCH_STATEMENTS=1 (embedded server) prints each throughput phase's statements, those inside
the functions too; ORDO_BENCH_ACTIVITY=1 samples the active sessions every 5 ms during each throughput phase and
prints the top-level statements by their share of the samples on CPU (its own queries, some 200 a second,
count in transactions per task).`;

/** True when argv asks for this benchmark (`--only ext-workers`). */
export function wantsExternalWorkers(argv: string[]): boolean {
  const i = argv.findIndex((a) => a === '--only' || a.startsWith('--only='));
  if (i < 0) return false;
  const v = argv[i].startsWith('--only=') ? argv[i].slice(7) : (argv[i + 1] ?? '');
  return v.split(',').includes('ext-workers');
}

const POOL = 'bench';
const DAG_ID = 'ext-noop';
/** The one-step DAG's step. */
const STEP_ID = 'work';
/** The latency phase's two-step chain. */
const PAIR_ID = 'ext-pair';

interface WorkerGroup {
  child: ChildProcess;
  /** When each step's handler started (Date.now() in the worker process), by `runId/stepId`. */
  starts: Map<string, number>;
  ready: Promise<void>;
  stop(): Promise<void>;
}

/** Forks a process of `count` SDK workers (bench/ext-worker-process.ts, which imports the SDK alone). */
function workerGroup(
  url: string,
  tenantId: string,
  token: string,
  opts: { count: number; transport: TransportKind; maxConcurrent: number; reportStarts: boolean; name: string },
): WorkerGroup {
  const child = fork(join(__dirname, 'ext-worker-process.js'), [], {
    env: {
      PATH: process.env.PATH,
      POOL,
      ORDO_URL: url,
      ORDO_TENANT: tenantId,
      ORDO_TOKEN: token,
      WORKERS: String(opts.count),
      TRANSPORT: opts.transport,
      MAX_CONCURRENT: String(opts.maxConcurrent),
      REPORT_STARTS: opts.reportStarts ? '1' : '',
      NAME: opts.name,
    },
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const starts = new Map<string, number>();
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const ready = new Promise<void>((resolve, reject) => {
    child.on('message', (m: ExtWorkerMessage) => {
      if (m.type === 'ready') resolve();
      else starts.set(`${m.runId}/${m.stepId}`, m.t);
    });
    child.once('exit', (code) => reject(new Error(`worker process ${opts.name} exited with ${code}`)));
  });
  ready.catch(() => undefined);
  return {
    child,
    starts,
    ready,
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill('SIGTERM');
      const t = setTimeout(() => child.kill('SIGKILL'), 10_000);
      await exited;
      clearTimeout(t);
    },
  };
}

type RunShape = 'one' | 'burst';

/** p50, p90 and p99 of each stage of a task, ms (see STAGES). */
interface TaskStages {
  readyToClaim: number[];
  claimToOpen: number[];
  openToDeliver: number[];
  deliverToResult: number[];
}

/** The stages of a task: name, from, to (worker_task t, the step's attempt a). */
const STAGES: [keyof TaskStages, string, string][] = [
  ['readyToClaim', 'a.queued_at', 'a.claimed_at'],
  ['claimToOpen', 'a.claimed_at', 't.created_at'],
  ['openToDeliver', 't.created_at', 't.delivered_at'],
  ['deliverToResult', 't.delivered_at', 't.finished_at'],
];

interface ThroughputRow {
  transport: TransportKind;
  shape: RunShape;
  /** Which repeat of the phase (the same workers, one after another); the first starts cold. */
  repeat: number;
  /** On the figure of a phase (its median repeat): every repeat's tasks/s, in order. */
  repeats?: number[];
  tasks: number;
  seconds: number;
  tasksPerS: number;
  /** Runs that succeeded (all of them, when nothing went wrong). */
  succeeded: number;
  /** Transactions committed in the database per task (pg_stat_database xact_commit). */
  xactPerTask: number;
  /** Dispatches of the pool per task (the Ordo process's orchestrator_task_dispatches_total{by="wake-up"}). */
  dispatchesPerTask: number;
  /** CPU per task, ms: the Ordo process, the 4 worker processes, and PostgreSQL (embedded server only). */
  ordoCpuMsPerTask: number;
  workersCpuMsPerTask: number;
  pgCpuMsPerTask: number | null;
  /** Where a task's time went: its step ready → claimed by the built-in worker → opened → delivered → its result applied (the transaction's start). */
  stagesMs?: TaskStages;
}

interface LatencyRow {
  transport: TransportKind;
  runs: number;
  /** Task opened (worker_task.created_at) → handler start, ms. */
  dispatchMs: Stats;
  /** Run created (the create call answered) → handler start, ms. */
  endToEndMs: Stats;
  /**
   * A two-step chain's first handler (a no-op: it returns as it starts) → its successor's handler
   * start, ms: the successor made ready by the first one's result, dispatched in that result's
   * transaction (the built-in figure's "predecessor's plugin returned → successor's plugin started").
   */
  successorMs: Stats;
  /**
   * The successor's task opened → its handler start, ms: its task is opened in the transaction of
   * the result that made it ready, stamped with that transaction's start, so this is the step made
   * ready → its handler starts (a little more: the transaction's lock and resolve come before).
   */
  successorDispatchMs: Stats;
  /**
   * The commit of the transaction that opened the task → its handler start, ms: the one-step runs'
   * tasks (opened when the built-in worker hands their step back), and the successors' (opened in
   * the transaction of the result that made the step ready, so its commit is when the step became
   * ready). From the commit timestamps of the embedded server (track_commit_timestamp): empty
   * with --db.
   */
  committedMs: Stats;
  successorCommittedMs: Stats;
  /** Dispatches of the pool per task, the one-step runs' and the chains' tasks together (see ThroughputRow). */
  dispatchesPerTask: number | null;
}

interface IdleRow {
  workers: number;
  seconds: number;
  xactPerS: number;
  baselineXactPerS: number;
  /** Transactions a second each idle worker adds over the baseline. */
  perWorkerXactPerS: number;
}

/**
 * With ORDO_BENCH_ACTIVITY=1: samples the database's active sessions every few milliseconds while a
 * phase runs, from a session of its own, and counts each by what it waits on (CPU when nothing) and
 * its top-level statement. The shares of the samples on CPU say where PostgreSQL's CPU went by
 * statement, without the per-statement cost that tracking nested statements adds.
 */
function activitySampler(url: string): {
  stop(): Promise<{ samples: number; onCpu: number; top: [string, number][] }>;
} {
  const c = pgClient(url);
  const counts = new Map<string, number>();
  let samples = 0;
  let running = true;
  const loop = (async () => {
    await c.connect();
    while (running) {
      const r = await c.query<{ w: string; q: string }>(
        `select coalesce(wait_event_type || ':' || wait_event, 'CPU') w,
           left(regexp_replace(query, '\\s+', ' ', 'g'), 80) q
         from pg_stat_activity
         where datname = current_database() and state = 'active' and pid <> pg_backend_pid()
           and backend_type = 'client backend'`,
      );
      samples++;
      for (const row of r.rows) {
        const k = `${row.w} ${row.q.trim()}`;
        counts.set(k, (counts.get(k) ?? 0) + 1);
      }
      await sleep(5);
    }
  })();
  return {
    async stop() {
      running = false;
      await loop;
      await c.end();
      const onCpu = [...counts].reduce((sum, [k, v]) => (k.startsWith('CPU ') ? sum + v : sum), 0);
      return { samples, onCpu, top: [...counts].sort((a, b) => b[1] - a[1]).slice(0, 12) };
    },
  };
}

/** Runs the external-workers benchmark (`npm run bench -- --only ext-workers`). */
export async function runExternalWorkersBench(argv: string[]): Promise<void> {
  const { values } = parseArgs({
    args: argv,
    options: {
      only: { type: 'string' },
      db: { type: 'string' },
      out: { type: 'string', default: 'bench/results' },
      'ext-tasks': { type: 'string', default: '7000' },
      'ext-shapes': { type: 'string', default: 'one,burst' },
      'ext-concurrency': { type: 'string', default: '16' },
      'ext-repeats': { type: 'string', default: '3' },
      'ext-latency-runs': { type: 'string', default: '200' },
      'ext-idle-workers': { type: 'string', default: '1000' },
      'ext-idle-seconds': { type: 'string', default: '30' },
      help: { type: 'boolean', default: false },
    },
  });
  if (values.help) {
    console.log(EXT_WORKERS_HELP);
    return;
  }
  // ORDO_BENCH_STATEMENTS=1 on the embedded server: the statements of each throughput phase (pg_stat_statements,
  // the statements inside Ordo's SQL functions included).
  const statements = process.env.ORDO_BENCH_STATEMENTS === '1';
  const db = await freshDatabase(values.db ?? process.env.DATABASE_URL, 'extw', { statements, commitTimestamps: true });
  const procs = new Processes(db);
  const groups: WorkerGroup[] = [];
  const release = cleanupOnSignals();
  const owner = pgClient(db.ownerUrl);
  const { runs, close } = runsClient(db);
  try {
    await owner.connect();
    if (statements) await owner.query(`create extension if not exists pg_stat_statements`);
    if (statements)
      await owner.query(
        `do $x$ begin execute format('alter database %I set pg_stat_statements.track = ''all''', current_database()); end $x$`,
      );
    const ordo = await procs.start('api,worker,scheduler');
    const creds = procs.credentials();
    /** The dispatches the Ordo process has run on wake-ups so far (its /metrics). */
    const dispatches = async () => {
      const r = await fetch(`${ordo.url}/metrics`, { headers: { authorization: `Bearer ${creds.platformToken}` } });
      const m = /^orchestrator_task_dispatches_total\{by="wake-up"\} (\d+)$/m.exec(await r.text());
      if (!m) throw new Error(`/metrics answered ${r.status} without orchestrator_task_dispatches_total`);
      return Number(m[1]);
    };
    const queueStep = { plugin: 'queue', timeout: '10m', with: { taskType: 'noop', pool: POOL } };
    await publishDag(ordo.url, creds, { id: DAG_ID, steps: [{ id: STEP_ID, ...queueStep }] });
    await publishDag(ordo.url, creds, chainDag('ext-chain', 10, queueStep));
    const pair = chainDag(PAIR_ID, 2, queueStep);
    const [pairFirst, pairNext] = pair.steps.map((s) => s.id);
    await publishDag(ordo.url, creds, pair);
    await publishDag(ordo.url, creds, diamondDag('ext-diamond', queueStep));
    const minted = await fetch(`${ordo.url}/api/v1/tokens`, {
      method: 'POST',
      headers: authHeaders(creds),
      body: JSON.stringify({ scopes: ['worker'], pool: POOL, subject: 'bench' }),
    });
    if (minted.status !== 201) throw new Error(`worker token: ${minted.status} ${await minted.text()}`);
    const token = ((await minted.json()) as { token: string }).token;
    const group = (opts: Parameters<typeof workerGroup>[3]) => {
      const g = workerGroup(ordo.url, creds.tenantId, token, opts);
      groups.push(g);
      return g;
    };
    const stopAll = async () => {
      await Promise.all(groups.splice(0).map((g) => g.stop()));
      // Their registrations end offline (they left): the next phase starts with none.
    };
    let seq = 0;
    /** Creates `n` runs, of the one-step DAG, of the burst's mix, or of the two-step chain. */
    const create = async (n: number, shape: RunShape | 'pair' = 'one') => {
      const made: string[] = [];
      for (let i = 0; i < n; i += 500) {
        const batch = Array.from({ length: Math.min(500, n - i) }, (_, j) => ({
          dagId: shape === 'one' ? DAG_ID : shape === 'pair' ? PAIR_ID : `ext-${shapeOf(i + j)}`,
          inputs: {},
          runToken: `ext-${++seq}`,
          requestedBy: 'bench',
        }));
        made.push(...(await runs.createRuns(creds.tenantId, batch)).map((r) => r.runId));
      }
      return made;
    };
    const remaining = async (ids: string[]) =>
      (
        await owner.query<{ n: number }>(
          `select count(*)::int n from run where run_id = any($1::uuid[]) and status not in ('succeeded', 'failed', 'cancelled')`,
          [ids],
        )
      ).rows[0].n;

    const xactCommitted = async () =>
      Number(
        (
          await owner.query<{ n: string }>(
            `select xact_commit::text n from pg_stat_database where datname = current_database()`,
          )
        ).rows[0].n,
      );

    // ---- throughput ----
    const throughput: ThroughputRow[] = [];
    const allRepeats: ThroughputRow[] = [];
    const shapes = values['ext-shapes'].split(',');
    const unknown = shapes.find((sh) => sh !== 'one' && sh !== 'burst');
    if (unknown !== undefined) throw new Error(`--ext-shapes: unknown shape ${unknown} (one, burst)`);
    for (const [shape, transport] of (shapes as RunShape[]).flatMap((sh) =>
      (['websocket', 'long-poll'] as const).map((t) => [sh, t] as const),
    )) {
      const gs = [0, 1, 2, 3].map((i) =>
        group({
          count: 1,
          transport,
          maxConcurrent: Number(values['ext-concurrency']),
          reportStarts: false,
          name: `tp-${transport}-${i}`,
        }),
      );
      await Promise.all(gs.map((g) => g.ready));
      const runCount = shape === 'one' ? Number(values['ext-tasks']) : Math.round(Number(values['ext-tasks']) / 10);
      const n = shape === 'one' ? runCount : runCount * 10;
      const cpu = () => ({
        ordo: cpuMs(ordo.pid),
        workers: gs.reduce((sum, g) => sum + cpuMs(g.child.pid!), 0),
        pg: db.postmasterPid === null ? null : postgresCpuMs(db.postmasterPid),
      });
      const reps: ThroughputRow[] = [];
      for (let rep = 0; rep < Number(values['ext-repeats']); rep++) {
        await sleep(rep === 0 ? 1_500 : 500);
        if (statements) await owner.query(`select pg_stat_statements_reset()`);
        const [xact0, cpu0, dispatches0] = [await xactCommitted(), cpu(), await dispatches()];
        const sampler = process.env.ORDO_BENCH_ACTIVITY === '1' ? activitySampler(db.ownerUrl) : null;
        const t0 = Date.now();
        const ids = await create(runCount, shape);
        while ((await remaining(ids)) > 0) await sleep(100);
        if (sampler) {
          const { samples, onCpu, top } = await sampler.stop();
          console.log(`  active sessions in ${samples} samples (the shares of those on CPU):`);
          for (const [k, v] of top)
            console.log(
              `  ${String(v).padStart(6)}${k.startsWith('CPU ') ? ` ${((v / onCpu) * 100).toFixed(0).padStart(3)} %` : '      '}  ${k}`,
            );
        }
        const end = (
          await owner.query<{ end: Date; ok: number }>(
            `select max(finished_at) as end, count(*) filter (where status = 'succeeded')::int ok from run where run_id = any($1::uuid[])`,
            [ids],
          )
        ).rows[0];
        const cpu1 = cpu();
        // Statistics are flushed about once a second.
        await sleep(1_500);
        const xact1 = await xactCommitted();
        const seconds = (end.end.getTime() - t0) / 1000;
        const row: ThroughputRow = {
          transport,
          shape,
          repeat: rep,
          tasks: n,
          seconds: round(seconds),
          tasksPerS: Math.round(n / seconds),
          succeeded: end.ok,
          xactPerTask: round((xact1 - xact0) / n, 2),
          dispatchesPerTask: round(((await dispatches()) - dispatches0) / n, 2),
          ordoCpuMsPerTask: round((cpu1.ordo - cpu0.ordo) / n, 3),
          workersCpuMsPerTask: round((cpu1.workers - cpu0.workers) / n, 3),
          pgCpuMsPerTask: cpu1.pg === null || cpu0.pg === null ? null : round((cpu1.pg - cpu0.pg) / n, 3),
        };
        log(
          `ext-workers throughput ${transport}, ${shape} #${rep}: ${row.tasksPerS} tasks/s (${n} in ${row.seconds} s, load ${load1()}), ` +
            `${row.xactPerTask} transactions/task, ${row.dispatchesPerTask} dispatches/task, CPU ms/task: Ordo ${row.ordoCpuMsPerTask}, workers ${row.workersCpuMsPerTask}, ` +
            `PostgreSQL ${row.pgCpuMsPerTask ?? 'not measured (--db)'}`,
        );
        // Where a task's time went (database clocks): its step ready → claimed by the built-in worker →
        // its task opened → delivered to a worker → its result's transaction began.
        const stages = (
          await owner.query<Record<keyof TaskStages, number[]>>(
            `select ${STAGES.map(
              ([name, from, to]) =>
                `percentile_cont(array[0.5, 0.9, 0.99]) within group (order by extract(epoch from ${to} - ${from}) * 1000) as "${name}"`,
            ).join(', ')}
           from worker_task t join attempt a on a.tenant_id = t.tenant_id and a.run_id = t.run_id
             and a.step_id = t.step_id and a.attempt = t.attempt
           where t.run_id = any($1::uuid[])`,
            [ids],
          )
        ).rows[0];
        row.stagesMs = Object.fromEntries(
          Object.entries(stages).map(([k, v]) => [k, v.map((x) => round(x, 1))]),
        ) as unknown as TaskStages;
        reps.push(row);
        if (statements) {
          // Beside the time (which includes waits for locks): the rows, the blocks the statement
          // read (hit or not) and dirtied, and the WAL it wrote (full-page images among its records).
          const top = await owner.query<{ calls: string; ms: string; io: string; q: string }>(
            `select calls::text, round(total_exec_time::numeric, 1)::text || ' max ' || round(max_exec_time::numeric, 1)::text
               || ' ms, planning ' || round(total_plan_time::numeric, 1)::text || ' ms in ' || plans ms,
             rows || ' rows, ' || (shared_blks_hit + shared_blks_read) || ' blocks, ' || shared_blks_dirtied || ' dirtied, ' || wal_records || ' wal (' || wal_fpi || ' fpi, '
               || pg_size_pretty(wal_bytes) || ')' io,
             left(regexp_replace(query, '\\s+', ' ', 'g'), 200) q
           from pg_stat_statements order by total_exec_time desc limit 60`,
          );
          for (const r of top.rows) console.log(`  ${r.ms}  ${r.calls} calls  ${r.io}  ${r.q}`);
          // Planning counts the statements inside the functions too (planned when a session first
          // runs them, or again after an ANALYZE of a table they read); it falls within the top-level
          // statements' time.
          const sums = await owner.query<{ exec: string; top: string; all: string; plan: string; plans: string }>(
            `select round(sum(total_exec_time) filter (where toplevel)::numeric, 1)::text exec,
             sum(calls) filter (where toplevel)::text top, sum(calls)::text "all",
             round(sum(total_plan_time)::numeric, 1)::text plan, sum(plans)::text plans from pg_stat_statements`,
          );
          const t = sums.rows[0];
          console.log(
            `  top-level statements ${t.exec} ms in ${t.top} calls (${t.all} with those inside functions); planning in all ${t.plan} ms (${t.plans} plans)`,
          );
        }
      }
      // The figure is the median repeat, as the engine burst's (its first repeat starts cold too).
      const mid = [...reps].sort((a, b) => a.tasksPerS - b.tasksPerS)[Math.floor((reps.length - 1) / 2)];
      throughput.push({ ...mid, repeats: reps.map((r) => r.tasksPerS) });
      allRepeats.push(...reps);
      await stopAll();
    }

    // ---- dispatch latency ----
    const latency: LatencyRow[] = [];
    const commitTimes =
      (await owner.query<{ on: string }>(`select current_setting('track_commit_timestamp') as on`)).rows[0].on === 'on';
    // When the transaction that opened the step's task committed: its step.waiting event was written
    // in it, and events are never updated.
    const openedCommitted = async (runId: string, stepId: string): Promise<number | undefined> => {
      if (!commitTimes) return undefined;
      const r = await owner.query<{ t: Date | null }>(
        `select pg_xact_commit_timestamp(e.xmin) t from run_event e
         where e.tenant_id = $1 and e.run_id = $2 and e.step_id = $3 and e.type = 'step.waiting'`,
        [creds.tenantId, runId, stepId],
      );
      return r.rows.length === 1 ? (r.rows[0].t?.getTime() ?? undefined) : undefined;
    };
    for (const transport of ['long-poll', 'websocket'] as const) {
      const g = group({ count: 1, transport, maxConcurrent: 1, reportStarts: true, name: `lat-${transport}` });
      await g.ready;
      const dispatch: number[] = [];
      const endToEnd: number[] = [];
      const successor: number[] = [];
      const successorDispatch: number[] = [];
      const committed: number[] = [];
      const successorCommitted: number[] = [];
      const dispatches0 = await dispatches();
      for (let i = 0; i < Number(values['ext-latency-runs']); i++) {
        const [runId] = await create(1);
        const created = Date.now();
        const started = `${runId}/${STEP_ID}`;
        while (!g.starts.has(started)) await sleep(2);
        while ((await remaining([runId])) > 0) await sleep(5);
        const opened = (
          await owner.query<{ t: Date }>(`select created_at t from worker_task where run_id = $1`, [runId])
        ).rows[0].t;
        dispatch.push(g.starts.get(started)! - opened.getTime());
        const openedAt = await openedCommitted(runId, STEP_ID);
        if (openedAt !== undefined) committed.push(g.starts.get(started)! - openedAt);
        endToEnd.push(g.starts.get(started)! - created);
        const [pairId] = await create(1, 'pair');
        const next = `${pairId}/${pairNext}`;
        while (!g.starts.has(next)) await sleep(2);
        while ((await remaining([pairId])) > 0) await sleep(5);
        successor.push(g.starts.get(next)! - g.starts.get(`${pairId}/${pairFirst}`)!);
        const nextOpened = (
          await owner.query<{ t: Date }>(`select created_at t from worker_task where run_id = $1 and step_id = $2`, [
            pairId,
            pairNext,
          ])
        ).rows[0].t;
        successorDispatch.push(g.starts.get(next)! - nextOpened.getTime());
        const readyAt = await openedCommitted(pairId, pairNext);
        if (readyAt !== undefined) successorCommitted.push(g.starts.get(next)! - readyAt);
      }
      const row = {
        transport,
        runs: dispatch.length,
        dispatchMs: stats(dispatch),
        endToEndMs: stats(endToEnd),
        successorMs: stats(successor),
        successorDispatchMs: stats(successorDispatch),
        committedMs: stats(committed),
        successorCommittedMs: stats(successorCommitted),
        // Each round: a one-step run and a two-step chain.
        dispatchesPerTask:
          dispatch.length === 0 ? null : round(((await dispatches()) - dispatches0) / (3 * dispatch.length), 2),
      };
      log(
        `ext-workers latency ${transport}: dispatch p50 ${row.dispatchMs.p50} ms, p99 ${row.dispatchMs.p99} ms; ` +
          `successor p50 ${row.successorMs.p50} ms, p99 ${row.successorMs.p99} ms; ` +
          `successor's task opened → handler p50 ${row.successorDispatchMs.p50} ms, p99 ${row.successorDispatchMs.p99} ms; ` +
          `from the commit that opened the task: p50 ${row.committedMs.p50} ms, p99 ${row.committedMs.p99} ms, ` +
          `successor's p50 ${row.successorCommittedMs.p50} ms, p99 ${row.successorCommittedMs.p99} ms; ` +
          `${row.dispatchesPerTask} dispatches/task`,
      );
      latency.push(row);
      await stopAll();
    }

    // ---- idle long-polling workers ----
    const seconds = Number(values['ext-idle-seconds']);
    const xactRate = async () => {
      const read = xactCommitted;
      // Statistics are flushed about once a second: let the last ones land on both sides of the window.
      await sleep(1_500);
      const a = await read();
      await sleep(seconds * 1000);
      await sleep(1_500);
      const b = await read();
      // The two reads are the benchmark's own transactions.
      return (b - a - 1) / (seconds + 1.5);
    };
    // The phases before leave work behind (sweeps of the workers that left, reputations): it settles first.
    await sleep(5_000);
    const baseline = await xactRate();
    const workers = Number(values['ext-idle-workers']);
    const idleGroup = group({
      count: workers,
      transport: 'long-poll',
      maxConcurrent: 1,
      reportStarts: false,
      name: 'idle',
    });
    await idleGroup.ready;
    // Every worker registered (a thousand take a while from one process), then their first pulls
    // and heartbeats settle before the window.
    const registered = async () =>
      (
        await owner.query<{ n: number }>(
          `select count(*)::int n from worker where pool = $1 and status = 'online' and name like 'idle-%'`,
          [POOL],
        )
      ).rows[0].n;
    for (const until = Date.now() + 300_000; (await registered()) < workers && Date.now() < until;) await sleep(1_000);
    await sleep(10_000);
    const busy = await xactRate();
    // After the window: the workers were there all along (none went offline meanwhile).
    const online = (
      await owner.query<{ n: number }>(
        `select count(*)::int n from worker where pool = $1 and status = 'online' and name like 'idle-%'`,
        [POOL],
      )
    ).rows[0].n;
    if (online !== workers) throw new Error(`idle: ${online} of ${workers} workers online after the window`);
    const idle: IdleRow = {
      workers,
      seconds,
      xactPerS: round(busy),
      baselineXactPerS: round(baseline),
      perWorkerXactPerS: round((busy - baseline) / workers, 4),
    };
    log(`ext-workers idle: ${idle.xactPerS} xact/s with ${workers} workers, ${idle.baselineXactPerS} without`);
    await stopAll();

    const result = {
      machine: machine(),
      database: db.embedded ? 'embedded' : 'server',
      throughput,
      throughputRepeats: allRepeats,
      latency,
      idle,
    };
    const file = writeResult(values.out, 'ext-workers', result);
    console.log(
      `\n| transport | shape | tasks | tasks/s: median (repeats) | transactions/task | dispatches/task | CPU ms/task Ordo | workers | PostgreSQL |\n|---|---|---|---|---|---|---|---|---|`,
    );
    for (const r of throughput)
      console.log(
        `| ${r.transport} | ${r.shape} | ${r.tasks} | ${r.tasksPerS} (${(r.repeats ?? []).join(' · ')}) | ${r.xactPerTask} | ${r.dispatchesPerTask} | ${r.ordoCpuMsPerTask} | ${r.workersCpuMsPerTask} | ${r.pgCpuMsPerTask ?? ''} |`,
      );
    console.log(
      `\n| transport | shape | ready → claimed (built-in worker or hand-over) ms p50/p90/p99 | claim → opened | opened → delivered | delivered → result applied |\n|---|---|---|---|---|---|`,
    );
    for (const r of throughput)
      if (r.stagesMs)
        console.log(`| ${r.transport} | ${r.shape} | ${STAGES.map(([k]) => r.stagesMs![k].join(' / ')).join(' | ')} |`);
    console.log(
      `\n| transport | runs | dispatch p50 ms | dispatch p99 ms | created → handler p50 ms | p99 ms | predecessor → successor p50 ms | p99 ms | successor's task opened → handler p50 ms | p99 ms | task's commit → handler p50 ms | p99 ms | successor's ready (commit) → handler p50 ms | p99 ms | dispatches/task |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|`,
    );
    for (const r of latency) {
      console.log(
        `| ${r.transport} | ${r.runs} | ${r.dispatchMs.p50} | ${r.dispatchMs.p99} | ${r.endToEndMs.p50} | ${r.endToEndMs.p99} | ${r.successorMs.p50} | ${r.successorMs.p99} | ${r.successorDispatchMs.p50} | ${r.successorDispatchMs.p99} | ${r.committedMs.p50} | ${r.committedMs.p99} | ${r.successorCommittedMs.p50} | ${r.successorCommittedMs.p99} | ${r.dispatchesPerTask} |`,
      );
    }
    console.log(`\n| idle long-polling workers | xact/s | xact/s with none | per worker |\n|---|---|---|---|`);
    console.log(`| ${idle.workers} | ${idle.xactPerS} | ${idle.baselineXactPerS} | ${idle.perWorkerXactPerS} |`);
    console.log(`\n${file}`);
  } finally {
    await Promise.all(groups.map((g) => g.stop()));
    await close();
    await owner.end().catch(() => undefined);
    await procs.stopAll();
    await db.close();
    release();
  }
}
