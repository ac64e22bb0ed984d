import 'reflect-metadata';
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { Database } from '../src/core/database/database';
import { startEmbeddedPostgres, type EmbeddedPostgresHandle } from '../src/core/database/embedded';
import { migrate } from '../src/core/database/migrator';
import { SigningKeys } from '../src/modules/auth/signing-keys';
import { ExportRepository } from '../src/modules/export/export.repository';
import { PlansRepository } from '../src/modules/plans/plans.repository';
import { QuotaChecks } from '../src/modules/plans/quota-checks';
import { TenantLimits } from '../src/modules/plans/tenant-limits';
import { ExportService } from '../src/modules/export/export.service';

export interface ExportBenchOptions {
  /** PostgreSQL server URL (owner); a fresh database is created on it and dropped afterwards. */
  serverUrl: string;
  events: number;
  runs: number;
  /** Where the NDJSON goes (default: a temporary file, removed afterwards). */
  out?: string;
  log?: (line: string) => void;
}

export interface ExportBenchResult {
  events: number;
  runs: number;
  lines: number;
  bytes: number;
  seconds: number;
  linesPerSecond: number;
  /** Resident set size (MiB) when the export starts, after 10 % of the lines, at its peak and at the end. */
  rssStartMiB: number;
  rssAt10PercentMiB: number;
  rssPeakMiB: number;
  rssEndMiB: number;
  /** Peak minus the 10 % reading: what the remaining 90 % of the export added. */
  rssGrowthAfterWarmupMiB: number;
  heapPeakMiB: number;
  insertSeconds: number;
}

const mib = (b: number) => Math.round((b / 1024 / 1024) * 10) / 10;

/**
 * Export RSS benchmark: inserts `events` run events spread over `runs` runs in bulk (two
 * generate_series statements), then exports the tenant through ExportService to a file while
 * sampling RSS every 100 ms. Constant-memory streaming shows as an RSS that stops growing once the
 * first pages are in flight.
 */
export async function runExportBench(opts: ExportBenchOptions): Promise<ExportBenchResult> {
  const log = opts.log ?? ((l: string) => console.log(l));
  const dbName = `ordo_export_bench_${process.pid}`;
  const admin = new pg.Client({ connectionString: opts.serverUrl });
  await admin.connect();
  await admin.query(`drop database if exists ${dbName} with (force)`);
  await admin.query(`create database ${dbName}`);
  const u = new URL(opts.serverUrl);
  u.pathname = `/${dbName}`;
  const ownerUrl = u.toString();
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'ordo-export-bench-'));
  let database: Database | undefined;
  try {
    const m = await migrate(ownerUrl);
    const owner = new pg.Client({ connectionString: ownerUrl });
    await owner.connect();
    const perRun = Math.ceil(opts.events / opts.runs);
    const t0 = performance.now();
    try {
      await owner.query(`insert into tenant (id, name) values ('bench', 'bench')`);
      await owner.query(
        `insert into run (tenant_id, run_id, dag_id, dag_version, content_hash, run_token, inputs, inputs_hash, status, trace_id,
           requested_by, created_at, started_at, finished_at, steps_total, steps_remaining, event_seq, event_hash)
         select 'bench', md5('run' || g)::uuid, 'dag-' || (g % 10), 1, repeat('c', 64), 'tok-' || g, '{"n":1}', repeat('a', 64), 'succeeded',
           md5('trace' || g), 'bench', t, t, t + interval '1 minute', 1, 0, $2, repeat('e', 64)
         from generate_series(1, $1::int) g, lateral (select timestamptz '2026-01-01' + g * interval '1 second' as t) ts`,
        [opts.runs, perRun],
      );
      await owner.query(
        `insert into run_event (tenant_id, run_id, seq, created_at, type, step_id, attempt, actor, data, prev_hash, hash)
         select 'bench', r.run_id, s, r.started_at + s * interval '1 millisecond', 'step.succeeded', 'step-' || (s % 20), 1, 'engine',
           jsonb_build_object('outputsHash', md5(r.run_id::text || s)), '', encode(sha256((r.run_id::text || s)::bytea), 'hex')
         from run r cross join generate_series(1, $1::int) s
         where r.tenant_id = 'bench'`,
        [perRun],
      );
      await owner.query('analyze run; analyze run_event');
    } finally {
      await owner.end();
    }
    const insertSeconds = (performance.now() - t0) / 1000;
    log(`inserted ${opts.runs} runs, ${perRun * opts.runs} events in ${insertSeconds.toFixed(1)} s`);

    database = new Database(
      { app: m.appUrl, system: m.systemUrl },
      { poolSize: 4, applicationName: 'ordo:bench-export' },
    );
    const keys = await SigningKeys.open(path.join(tmp, 'keys'), { create: true });
    const service = new ExportService(
      database,
      new ExportRepository(),
      keys,
      new QuotaChecks(database, new PlansRepository(), new TenantLimits(database)),
    );
    const file = opts.out ?? path.join(tmp, 'export.ndjson');
    const fd = fs.openSync(file, 'w');

    global.gc?.();
    const rssStart = process.memoryUsage().rss;
    let rssPeak = rssStart;
    let heapPeak = 0;
    let rss10 = 0;
    const sampler = setInterval(() => {
      const mu = process.memoryUsage();
      rssPeak = Math.max(rssPeak, mu.rss);
      heapPeak = Math.max(heapPeak, mu.heapUsed);
    }, 100);
    const expectedLines = opts.runs * (perRun + 1 + 1);
    let lines = 0;
    let bytes = 0;
    const sha = createHash('sha256');
    const t1 = performance.now();
    try {
      const it = service.lines('bench', {});
      let r = await it.next();
      let buf: string[] = [];
      while (!r.done) {
        buf.push(r.value);
        lines += 1;
        if (buf.length === 1000) {
          const chunk = buf.join('');
          sha.update(chunk);
          bytes += Buffer.byteLength(chunk);
          fs.writeSync(fd, chunk);
          buf = [];
        }
        if (rss10 === 0 && lines >= expectedLines / 10) rss10 = process.memoryUsage().rss;
        if (lines % 200_000 === 0) log(`  ${lines} lines, rss ${mib(process.memoryUsage().rss)} MiB`);
        r = await it.next();
      }
      const chunk = buf.join('');
      bytes += Buffer.byteLength(chunk);
      fs.writeSync(fd, chunk);
    } finally {
      clearInterval(sampler);
      fs.closeSync(fd);
    }
    const seconds = (performance.now() - t1) / 1000;
    const rssEnd = process.memoryUsage().rss;
    rssPeak = Math.max(rssPeak, rssEnd);
    return {
      events: perRun * opts.runs,
      runs: opts.runs,
      lines,
      bytes,
      seconds: Math.round(seconds * 10) / 10,
      linesPerSecond: Math.round(lines / seconds),
      rssStartMiB: mib(rssStart),
      rssAt10PercentMiB: mib(rss10),
      rssPeakMiB: mib(rssPeak),
      rssEndMiB: mib(rssEnd),
      rssGrowthAfterWarmupMiB: mib(rssPeak - rss10),
      heapPeakMiB: mib(heapPeak),
      insertSeconds: Math.round(insertSeconds * 10) / 10,
    };
  } finally {
    await database?.close();
    await admin.query(`drop database if exists ${dbName} with (force)`).catch(() => undefined);
    await admin.end();
    fs.rmSync(tmp, { recursive: true, force: true });
  }
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      db: { type: 'string' },
      events: { type: 'string', default: '1000000' },
      runs: { type: 'string', default: '1000' },
      out: { type: 'string' },
      help: { type: 'boolean' },
    },
  });
  if (values.help) {
    console.log(
      'Usage: node dist/bench/export-bench.js [--db URL] [--events 1000000] [--runs 1000] [--out results-dir]',
    );
    return;
  }
  let embedded: EmbeddedPostgresHandle | undefined;
  let serverUrl = values.db ?? process.env.DATABASE_URL;
  let dir: string | undefined;
  if (!serverUrl) {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ordo-export-bench-pg-'));
    embedded = await startEmbeddedPostgres(dir, { port: 56000 + (process.pid % 1000) });
    serverUrl = embedded.ownerUrl;
  }
  try {
    const result = await runExportBench({ serverUrl, events: Number(values.events), runs: Number(values.runs) });
    console.table(result);
    if (values.out) {
      fs.mkdirSync(values.out, { recursive: true });
      const f = path.join(values.out, `export-${new Date().toISOString().replace(/[:.]/g, '-')}.json`);
      fs.writeFileSync(f, `${JSON.stringify(result, null, 2)}\n`);
      console.log(`wrote ${f}`);
    }
  } finally {
    await embedded?.stop();
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  }
}

if (require.main === module) {
  main().catch((e: unknown) => {
    console.error(e);
    process.exit(1);
  });
}
