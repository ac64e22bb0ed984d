import 'reflect-metadata';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { Database } from '../src/core/database/database';
import { migrate } from '../src/core/database/migrator';
import { RetentionRepository, type RetentionPolicy } from '../src/modules/retention/retention.repository';

export interface RetentionBenchOptions {
  /** PostgreSQL server URL (owner); a fresh database is created on it and dropped afterwards. */
  serverUrl: string;
  /** Events in all, spread evenly over `months` ended months (default 10,000,000 over 10). */
  events: number;
  months: number;
  /** Events per run. */
  perRun: number;
  /** Steps per run, each with an attempt, a logs artifact of its own and the outputs artifact all share (default 10). */
  stepsPerRun?: number;
  log?: (line: string) => void;
}

export interface RetentionBenchResult {
  events: number;
  months: number;
  runs: number;
  insertSeconds: number;
  /** Wall time of ordo_retention_drop_month for the oldest month (checks, detach and drop of three partitions, commit). */
  dropMs: number;
  /** From the first DETACH to the function's end: how long the parents' ACCESS EXCLUSIVE locks were held (plus the commit). */
  lockedMs: number;
  eventsDropped: number;
  /** The slowest of the event inserts (current month) another connection made every 2 ms while the month was dropped. */
  concurrentInsertMaxMs: number;
  concurrentInserts: number;
  /** One batch of retention by rows (ordo_retention_purge) of `batchRuns` runs in the next month, for comparison. */
  batchRuns: number;
  batchEvents: number;
  batchMs: number;
  stepsPerRun: number;
  /** The tenant's steps and attempts when the sweep ran (each read once by it). */
  sweepSteps: number;
  /** One sweep of the tenant's artifact candidates (ordo_retention_sweep_artifacts) after the purges. */
  sweepCandidates: number;
  sweepArtifacts: number;
  sweepMs: number;
}

const MONTH_ZERO = (months: number) => {
  const now = new Date();
  return new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth() - months, 1));
};

/**
 * Retention benchmark: `events` run events of finished runs spread over the `months` months before
 * this one, in month partitions (a seed row per month is moved out of the default partition by
 * ordo_partitions_ensure, then the bulk insert routes to the partitions), then the oldest month is
 * dropped (ordo_retention_drop_month) while another connection inserts an event every 2 ms into the
 * current month, then one batch of row-by-row retention in the next month for comparison, then one
 * sweep of the artifacts the deleted runs named. Each run has `stepsPerRun` steps, each with an
 * attempt and a logs artifact of its own; every step names the same outputs artifact (each stored on
 * its step's day, as the engine stores them).
 */
export async function runRetentionBench(opts: RetentionBenchOptions): Promise<RetentionBenchResult> {
  const log = opts.log ?? ((l: string) => console.error(l));
  const dbName = `ordo_retention_bench_${process.pid}`;
  const admin = new pg.Client({ connectionString: opts.serverUrl });
  await admin.connect();
  await admin.query(`drop database if exists ${dbName} with (force)`);
  await admin.query(`create database ${dbName}`);
  const u = new URL(opts.serverUrl);
  u.pathname = `/${dbName}`;
  const ownerUrl = u.toString();
  let database: Database | undefined;
  const owner = new pg.Client({ connectionString: ownerUrl });
  const writer = new pg.Client({ connectionString: ownerUrl });
  try {
    const m = await migrate(ownerUrl);
    await owner.connect();
    await writer.connect();
    const runsPerMonth = Math.ceil(opts.events / opts.months / opts.perRun);
    const runs = runsPerMonth * opts.months;
    const start = MONTH_ZERO(opts.months);
    const t0 = performance.now();
    await owner.query(`insert into tenant (id, name) values ('bench', 'bench')`);
    await owner.query(`insert into plan (id, limits) values ('bench', '{"retentionDays": 1}')`);
    await owner.query(`insert into tenant_plan (tenant_id, plan_id) values ('bench', 'bench')`);
    // Runs: month k holds runs k * runsPerMonth + 1 .. (k + 1) * runsPerMonth, a minute apart at most.
    await owner.query(
      `insert into run (tenant_id, run_id, dag_id, dag_version, content_hash, run_token, inputs, inputs_hash, status, trace_id,
         requested_by, created_at, started_at, finished_at, steps_total, steps_remaining, event_seq, event_hash)
       select 'bench', md5('run' || g)::uuid, 'dag', 1, repeat('c', 64), 'tok-' || g, '{}', repeat('a', 64), 'succeeded',
         md5('trace' || g), 'bench', t, t, t + interval '1 second', 1, 0, $3, repeat('e', 64)
       from generate_series(0, $1::int - 1) g,
         lateral (select $2::timestamptz + make_interval(months => g / $4::int)
           + (g % $4::int) * (interval '27 days' / $4::int) as t) ts`,
      [runs, start.toISOString(), opts.perRun, runsPerMonth],
    );
    // One event per month first: ordo_partitions_ensure makes each month's partitions from them.
    await owner.query(
      `insert into run_event (tenant_id, run_id, seq, created_at, type, actor, data, prev_hash, hash)
       select 'bench', r.run_id, 1, r.created_at, 'run.created', 'engine', '{}', '', repeat('1', 64)
       from run r where r.run_id in (select md5('run' || (k * $1::int))::uuid from generate_series(0, $2::int - 1) k)`,
      [runsPerMonth, opts.months],
    );
    await owner.query('select ordo_partitions_ensure(3)');
    for (let k = 0; k < opts.months; k++) {
      const tm = performance.now();
      await owner.query(
        `insert into run_event (tenant_id, run_id, seq, created_at, type, step_id, attempt, actor, data, prev_hash, hash)
         select 'bench', r.run_id, s, r.created_at + s * interval '1 millisecond', 'step.succeeded', 'step-' || (s % 20), 1,
           'engine', jsonb_build_object('outputsHash', md5(r.run_id::text || s)), '', encode(sha256((r.run_id::text || s)::bytea), 'hex')
         from run r cross join generate_series(1, $1::int) s
         where r.tenant_id = 'bench' and r.created_at >= $2::timestamptz and r.created_at < $2::timestamptz + interval '1 month'
           and not (s = 1 and r.run_id in (select md5('run' || (k * $3::int))::uuid from generate_series(0, $4::int - 1) k))`,
        [
          opts.perRun,
          new Date(Date.UTC(start.getUTCFullYear(), start.getUTCMonth() + k, 1)).toISOString(),
          runsPerMonth,
          opts.months,
        ],
      );
      log(
        `month ${k + 1}/${opts.months}: ${runsPerMonth * opts.perRun} events in ${((performance.now() - tm) / 1000).toFixed(1)} s`,
      );
    }
    const stepsPerRun = opts.stepsPerRun ?? 10;
    const ts = performance.now();
    await owner.query(
      `insert into step (tenant_id, run_id, step_id, status, plugin, config, spec, depends_on, topo_index, pending_deps,
         attempts, epoch, outputs, outputs_hash, logs_hash, queued_at, started_at, finished_at)
       select 'bench', r.run_id, 's' || k, 'succeeded', 'noop', '{}', '{}', '{}', k, 0, 1, 1, '{}',
         encode(sha256('{}'::bytea), 'hex'), encode(sha256((r.run_id::text || k)::bytea), 'hex'),
         r.created_at, r.created_at, r.created_at + interval '1 second'
       from run r cross join generate_series(1, $1::int) k where r.tenant_id = 'bench'`,
      [stepsPerRun],
    );
    await owner.query(
      `insert into attempt (tenant_id, run_id, step_id, attempt, created_at, epoch, worker_id, status, lease_expires_at,
         traceparent, claimed_at, finished_at, outputs_hash, logs_hash)
       select s.tenant_id, s.run_id, s.step_id, 1, s.started_at, 1, 'w', 'succeeded', s.finished_at, '', s.started_at,
         s.finished_at, s.outputs_hash, s.logs_hash
       from step s where s.tenant_id = 'bench'`,
    );
    await owner.query(
      `insert into artifact (tenant_id, sha256, created_on, media_type, size, body_bytes)
       select distinct 'bench', h, s.finished_at::date, 'text/plain', 10, '\\x00'::bytea
       from step s cross join lateral unnest(array[s.outputs_hash, s.logs_hash]) h where s.tenant_id = 'bench'`,
    );
    log(`steps, attempts, artifacts: ${runs * stepsPerRun} each in ${((performance.now() - ts) / 1000).toFixed(1)} s`);
    await owner.query('analyze run; analyze run_event; analyze step; analyze attempt; analyze artifact');
    const insertSeconds = (performance.now() - t0) / 1000;
    const { rows: total } = await owner.query<{ n: string }>('select count(*) as n from run_event');
    log(`inserted ${runs} runs, ${total[0].n} events in ${insertSeconds.toFixed(1)} s`);
    const { rows: inOldest } = await owner.query<{ n: string }>(
      `select count(*) as n from run_event where created_at < $1::timestamptz + interval '1 month'`,
      [start.toISOString()],
    );

    database = new Database(
      { app: m.appUrl, system: m.systemUrl },
      { poolSize: 4, applicationName: 'ordo:bench-retention' },
    );
    const repo = new RetentionRepository();
    const policy: RetentionPolicy = {
      tenantId: 'bench',
      cutoff: new Date(Date.now() - 86_400_000),
      requiresExport: false,
    };

    // The hot path's writes go on while the month is dropped.
    const live = await owner.query<{ run_id: string }>(
      `insert into run (tenant_id, run_id, dag_id, dag_version, content_hash, run_token, inputs, inputs_hash, status, trace_id,
         requested_by, steps_total, steps_remaining)
       values ('bench', gen_random_uuid(), 'dag', 1, repeat('c', 64), 'live', '{}', repeat('a', 64), 'running',
         md5('live'), 'bench', 1, 1)
       returning run_id`,
    );
    let seq = 1_000_000;
    let stop = false;
    let worst = 0;
    let inserts = 0;
    const writing = (async () => {
      while (!stop) {
        const ti = performance.now();
        await writer.query(
          `insert into run_event (tenant_id, run_id, seq, created_at, type, actor, data, prev_hash, hash)
           values ('bench', $1, $2, now(), 'step.succeeded', 'engine', '{}', '', repeat('2', 64))`,
          [live.rows[0].run_id, seq++],
        );
        worst = Math.max(worst, performance.now() - ti);
        inserts++;
        await new Promise((r) => setTimeout(r, 2));
      }
    })();
    await new Promise((r) => setTimeout(r, 500));
    const baselineWorst = worst;
    worst = 0;
    const td = performance.now();
    const drop = await repo.dropMonth(database.system, start, [policy]);
    const dropMs = performance.now() - td;
    await new Promise((r) => setTimeout(r, 200));
    stop = true;
    await writing;
    if (!drop.dropped) throw new Error(`the month was not dropped: ${JSON.stringify(drop)}`);
    log(
      `dropped ${drop.partitions.join(', ')} (${inOldest[0].n} events) in ${dropMs.toFixed(1)} ms, locks held ${drop.lockedMs?.toFixed(2)} ms; ` +
        `concurrent inserts: slowest ${worst.toFixed(1)} ms during the drop, ${baselineWorst.toFixed(1)} ms before`,
    );

    // One batch of retention by rows: the first runs of the next month (the dropped month's runs go first).
    await repo.purge(database.system, policy, runsPerMonth);
    const batchRuns = 100;
    const tb = performance.now();
    const deleted = await repo.purge(database.system, policy, batchRuns);
    const batchMs = performance.now() - tb;
    log(`one purge batch: ${deleted} runs, ${deleted * opts.perRun} events in ${batchMs.toFixed(1)} ms`);

    // The sweep of the pass: the candidates of both purges above.
    const { rows: cand } = await owner.query<{ n: string; steps: string }>(
      `select set_config('app.tenant_id', 'bench', false), (select count(*) from artifact_candidate) as n,
         (select count(*) from step) + (select count(*) from attempt) as steps`,
    );
    const tw = performance.now();
    const swept = await repo.sweepArtifacts(database.system, 'bench');
    const sweepMs = performance.now() - tw;
    log(
      `one artifact sweep: ${cand[0].n} candidates, ${swept} artifacts deleted, over ${cand[0].steps} steps and attempts in ${sweepMs.toFixed(1)} ms`,
    );
    return {
      events: Number(total[0].n),
      months: opts.months,
      runs,
      insertSeconds: Math.round(insertSeconds),
      dropMs: Math.round(dropMs * 10) / 10,
      lockedMs: Math.round((drop.lockedMs ?? 0) * 100) / 100,
      eventsDropped: Number(inOldest[0].n),
      concurrentInsertMaxMs: Math.round(worst * 10) / 10,
      concurrentInserts: inserts,
      batchRuns: deleted,
      batchEvents: deleted * opts.perRun,
      batchMs: Math.round(batchMs * 10) / 10,
      stepsPerRun,
      sweepSteps: Number(cand[0].steps),
      sweepCandidates: Number(cand[0].n),
      sweepArtifacts: swept,
      sweepMs: Math.round(sweepMs * 10) / 10,
    };
  } finally {
    await writer.end().catch(() => undefined);
    await owner.end().catch(() => undefined);
    await database?.close();
    await admin.query(`drop database if exists ${dbName} with (force)`);
    await admin.end();
  }
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      db: { type: 'string' },
      events: { type: 'string', default: '10000000' },
      months: { type: 'string', default: '10' },
      'per-run': { type: 'string', default: '100' },
      'steps-per-run': { type: 'string', default: '10' },
      help: { type: 'boolean', default: false },
    },
  });
  if (values.help) {
    console.log(
      'Usage: node dist/bench/retention-bench.js --db URL [--events 10000000] [--months 10] [--per-run 100] [--steps-per-run 10]\n' +
        '(or npm run bench -- --only retention --db URL)',
    );
    return;
  }
  const serverUrl = values.db ?? process.env.DATABASE_URL;
  if (!serverUrl) throw new Error('--db or DATABASE_URL: a PostgreSQL server');
  const r = await runRetentionBench({
    serverUrl,
    events: Number(values.events),
    months: Number(values.months),
    perRun: Number(values['per-run']),
    stepsPerRun: Number(values['steps-per-run']),
  });
  console.log(JSON.stringify(r, null, 2));
}

if (require.main === module) {
  main().catch((e: unknown) => {
    console.error(e);
    process.exit(1);
  });
}
