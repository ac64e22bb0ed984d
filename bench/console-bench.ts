import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import pg from 'pg';
import pino from 'pino';
import type { Page } from 'playwright-core';
import { loadConfig } from '../src/core/config/config';
import { startEmbeddedPostgres } from '../src/core/database/embedded';
import { migrate } from '../src/core/database/migrator';
import type { DagDefinitionInput } from '../src/modules/dags/dag-definition';
import { startOrdo } from '../src/ordo';
import { launchChromium } from '../test/browser/browser';
import { round, stats, type Stats } from './support-load';

/**
 * The web console's first renders, measured in Debian's headless Chromium against a real Ordo:
 * the runs page of a tenant with 100,000 runs (seeded with SQL) and the page of a run of a
 * 1,000-step DAG (run to its end by the engine, so its attempts and ledger are real). Each figure
 * is from the navigation's start to the first animation frame that shows it, the median of
 * several loads after one that warms the browser's cache; each load starts once the one before
 * has no request in flight.
 */

export const CONSOLE_HELP = `--only console: the console's first renders (runs page with --console-runs runs in the
                           tenant, a run page of a --console-steps-step DAG) in headless Chromium
                           (CHROMIUM_PATH, default /usr/bin/chromium), median of --console-loads loads`;

export function wantsConsole(args: string[]): boolean {
  const i = args.findIndex((a) => a === '--only' || a.startsWith('--only='));
  if (i < 0) return false;
  const v = args[i].startsWith('--only=') ? args[i].slice('--only='.length) : args[i + 1];
  return v === 'console';
}

/** `steps` noop steps in layers of `width`, each depending on two of the layer before. */
function layered(id: string, steps: number, width: number): DagDefinitionInput {
  const name = (i: number) => `s${String(i).padStart(4, '0')}`;
  return {
    id,
    steps: Array.from({ length: steps }, (_, i) => {
      const layer = Math.floor(i / width);
      const k = i % width;
      const before = (layer - 1) * width;
      return {
        id: name(i),
        plugin: 'noop',
        dependsOn: layer === 0 ? [] : [...new Set([before + k, before + ((k + 1) % width)])].map(name),
        with: { output: { i } },
      };
    }),
  };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A node of EXPLAIN's JSON plan, the fields read here. */
interface PlanNode {
  'Node Type': string;
  'Index Name'?: string;
  Plans?: PlanNode[];
}

/** What shows a part of a page: at least `count` elements match `selector`, and the first holds `text`. */
interface Shown {
  selector: string;
  count?: number;
  text?: string;
}

/** Loads `url` `loads` + 1 times; each time, the page's clock when `shown` first holds (a rAF poll). */
async function firstRender(
  page: Page,
  url: string,
  shown: Shown,
  loads: number,
): Promise<{ cold: number; warm: Stats; api: Record<string, { end: Stats; duration: Stats }> }> {
  const times: number[] = [];
  const calls = new Map<string, { end: number[]; duration: number[] }>();
  for (let i = 0; i <= loads; i++) {
    await page.goto(url, { waitUntil: 'commit' });
    // A function, not a string: the console's Content-Security-Policy forbids eval.
    const t = await page.waitForFunction(
      (w: Shown) => {
        type Doc = { querySelectorAll(s: string): ArrayLike<{ textContent: string | null }> };
        const all = (globalThis as unknown as { document: Doc }).document.querySelectorAll(w.selector);
        const ok = all.length >= (w.count ?? 1) && (w.text === undefined || !!all[0].textContent?.includes(w.text));
        return ok && performance.now();
      },
      shown,
      { polling: 'raf', timeout: 120_000 },
    );
    times.push(Number(await t.jsonValue()));
    // The API calls the page made until then: when each answered, from the navigation's start.
    const entries = await page.evaluate(() =>
      performance
        .getEntriesByType('resource')
        .filter((e) => e.name.includes('/api/v1/'))
        .map((e) => ({
          name: e.name,
          end: (e as unknown as { responseEnd: number }).responseEnd,
          duration: e.duration,
        })),
    );
    if (i > 0) {
      for (const e of entries) {
        if (e.end > times[i]) continue;
        const key = apiCall(e.name);
        const c = calls.get(key) ?? { end: [], duration: [] };
        c.end.push(e.end);
        c.duration.push(e.duration);
        calls.set(key, c);
      }
    }
    // The next load starts when this one has nothing in flight, so that it is not measured
    // behind the requests of a page that already showed what was measured.
    await page.waitForLoadState('networkidle', { timeout: 60_000 });
  }
  const api = Object.fromEntries([...calls].map(([k, c]) => [k, { end: stats(c.end), duration: stats(c.duration) }]));
  return { cold: round(times[0]), warm: stats(times.slice(1)), api };
}

/** An API call's method-less path with ids and numbers replaced, so the loads' calls group. */
function apiCall(url: string): string {
  const u = new URL(url);
  const path = u.pathname
    .replace(/^\/api\/v1/, '')
    .replace(/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/g, ':id');
  const keys = [...u.searchParams.keys()].sort();
  return keys.length > 0 ? `${path}?${keys.join('&')}` : path;
}

export async function runConsoleBench(args: string[]): Promise<void> {
  const { values } = parseArgs({
    args,
    options: {
      db: { type: 'string' },
      only: { type: 'string' },
      'console-runs': { type: 'string', default: '100000' },
      'console-steps': { type: 'string', default: '1000' },
      'console-loads': { type: 'string', default: '5' },
      out: { type: 'string', default: 'bench/results' },
    },
  });
  const runsInTenant = Number(values['console-runs']);
  const steps = Number(values['console-steps']);
  const loads = Number(values['console-loads']);
  const log = (m: string) => console.error(`[bench ${new Date().toISOString().slice(11, 19)}] ${m}`);
  const cleanups: (() => Promise<unknown> | unknown)[] = [];
  try {
    const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'ordo-console-bench-'));
    fs.chmodSync(tmp, 0o711);
    cleanups.unshift(() => fs.rmSync(tmp, { recursive: true, force: true }));
    let serverUrl = values.db ?? process.env.DATABASE_URL;
    if (!serverUrl) {
      const e = await startEmbeddedPostgres(path.join(tmp, 'pg'), {
        port: 56000 + (process.pid % 3000),
        database: 'postgres',
      });
      serverUrl = e.ownerUrl;
      cleanups.unshift(() => e.stop());
    }
    const dbName = `ordo_console_bench_${process.pid}`;
    const admin = new pg.Client({ connectionString: serverUrl });
    await admin.connect();
    await admin.query(`create database ${dbName}`);
    await admin.end();
    cleanups.unshift(async () => {
      const c = new pg.Client({ connectionString: serverUrl });
      await c.connect();
      await c.query(`drop database if exists ${dbName} with (force)`).finally(() => c.end());
    });
    const u = new URL(serverUrl);
    u.pathname = `/${dbName}`;
    const ownerUrl = u.toString();
    const m = await migrate(ownerUrl);
    const owner = new pg.Client({ connectionString: ownerUrl });
    await owner.connect();
    cleanups.unshift(() => owner.end());

    const config = loadConfig({
      ORDO_HOME: path.join(tmp, 'home'),
      PORT: '0',
      HOST: '127.0.0.1',
      LOG_LEVEL: 'silent',
      ORDO_ROLES: 'api,worker,scheduler',
    });
    const ordo = await startOrdo(config, pino({ level: 'silent' }), {
      appUrl: m.appUrl,
      systemUrl: m.systemUrl,
      ownerUrl,
    });
    cleanups.unshift(() => ordo.close());
    const first = ordo.firstStart;
    if (!first?.created) throw new Error('expected a first start on a fresh database');
    const as = { authorization: `Bearer ${first.adminToken}`, 'x-tenant-id': first.tenantId };
    /** The fields of the API's answers the bench reads. */
    interface Answer {
      runId: string;
      status: string;
      lastEventSeq: number;
    }
    const call = async (method: string, p: string, body?: unknown): Promise<Answer> => {
      const res = await fetch(`${ordo.url}/api/v1${p}`, {
        method,
        headers: { ...as, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
      const json = (await res.json()) as Answer;
      if (!res.ok) throw new Error(`${method} ${p}: ${String(res.status)} ${JSON.stringify(json)}`);
      return json;
    };

    // ---- the tenant's runs: one real run of a one-step DAG, then copies of it by SQL ----
    await call('POST', '/dags', { id: 'seeded', steps: [{ id: 'only', plugin: 'noop' }] });
    const dag = layered('wide', steps, 50);
    await call('POST', '/dags', dag);
    const seed = await call('POST', '/runs', { dagId: 'seeded', inputs: {}, runToken: 'seed' });
    while ((await call('GET', `/runs/${String(seed.runId)}`)).status !== 'succeeded') await sleep(100);
    log(`console: seeding ${String(runsInTenant)} runs`);
    const t0 = Date.now();
    // Newest first on the runs page: the seeded runs are older than the measured run.
    await owner.query(
      `insert into run (tenant_id, run_id, dag_id, dag_version, content_hash, run_token, inputs, inputs_hash, status,
         reason, trace_id, requested_by, created_at, started_at, finished_at, steps_total, steps_remaining, event_seq, event_hash)
       select r.tenant_id, gen_random_uuid(), r.dag_id, r.dag_version, r.content_hash, 'seed-' || i, jsonb_build_object('i', i),
         r.inputs_hash, case when i % 10 = 0 then 'failed' else 'succeeded' end, case when i % 10 = 0 then 'a step failed' end,
         r.trace_id, r.requested_by, now() - interval '1 hour' - i * interval '1 second',
         now() - interval '1 hour' - i * interval '1 second', now() - interval '1 hour' - i * interval '1 second' + interval '40 ms',
         1, 0, r.event_seq, r.event_hash
       from run r, generate_series(1, $2::int) i where r.run_id = $1`,
      [seed.runId, runsInTenant - 1],
    );
    await owner.query('analyze run');
    const seedMs = Date.now() - t0;

    // The runs list's query (the console's first page, and filtered by DAG and status) on its indexes.
    const plan = async (where: string) => {
      const r = await owner.query<{ 'QUERY PLAN': unknown }>(
        `explain (analyze, format json) select * from run where tenant_id = $1 ${where}
         order by created_at desc, run_id desc limit 51`,
        [first.tenantId],
      );
      const top = (r.rows[0]['QUERY PLAN'] as { Plan: PlanNode; 'Execution Time': number }[])[0];
      const indexes: string[] = [];
      const walk = (n: PlanNode) => {
        if (n['Index Name']) indexes.push(`${String(n['Node Type'])} ${String(n['Index Name'])}`);
        for (const c of n.Plans ?? []) walk(c);
      };
      walk(top.Plan);
      return { indexes, executionMs: round(top['Execution Time']) };
    };
    const plans = {
      firstPage: await plan(''),
      byDag: await plan(`and dag_id = 'seeded'`),
      byDagAndStatus: await plan(`and dag_id = 'seeded' and status = 'failed'`),
    };

    // ---- a run of the 1,000-step DAG, to its end ----
    log(`console: running a ${String(steps)}-step DAG`);
    const big = await call('POST', '/runs', { dagId: 'wide', inputs: {}, runToken: 'wide-1' });
    const t1 = Date.now();
    for (;;) {
      const r = await call('GET', `/runs/${String(big.runId)}`);
      if (r.status === 'succeeded') break;
      if (r.status === 'failed' || Date.now() - t1 > 600_000)
        throw new Error(`the ${String(steps)}-step run: ${String(r.status)}`);
      await sleep(500);
    }
    const detail = await call('GET', `/runs/${String(big.runId)}`);
    const total = (await owner.query<{ n: number }>(`select count(*)::int as n from run`)).rows[0].n;

    // ---- the browser ----
    const browser = await launchChromium();
    cleanups.unshift(() => browser.close());
    const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
    const page = await context.newPage();
    await page.goto(`${ordo.url}/runs`);
    await page.getByLabel('API token').fill(first.adminToken);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByRole('heading', { name: 'Runs' }).waitFor();

    log('console: loading the runs page');
    const runsPage = await firstRender(page, `${ordo.url}/runs`, { selector: 'tr[data-run-id]', count: 50 }, loads);
    const runUrl = `${ordo.url}/runs/${String(big.runId)}`;
    log('console: loading the run page');
    const stepsTable = await firstRender(page, runUrl, { selector: 'tr[data-step]', count: steps }, loads);
    const timeline = await firstRender(page, runUrl, { selector: '[data-gantt-step] rect.exec', count: steps }, loads);
    const graph = await firstRender(page, runUrl, { selector: '.graph [data-step]', count: steps }, loads);
    const ledger = await firstRender(page, runUrl, { selector: '[data-testid=chain-state]', text: 'verified' }, loads);

    const result = {
      system: 'ordo',
      section: 'console',
      startedAt: new Date().toISOString(),
      machine: { cpus: os.cpus().length, cpuModel: os.cpus()[0]?.model, loadavg: os.loadavg() },
      runsInDatabase: total,
      seedMs,
      runsListPlans: plans,
      run: { steps, events: detail.lastEventSeq },
      firstRenderMs: {
        runsPage,
        runPageSteps: stepsTable,
        runPageTimeline: timeline,
        runPageGraph: graph,
        runPageLedgerVerified: ledger,
      },
    };
    fs.mkdirSync(values.out, { recursive: true });
    const file = path.join(values.out, `console-${result.startedAt.replace(/[:.]/g, '-')}.json`);
    fs.writeFileSync(file, JSON.stringify(result, null, 2));
    console.log(JSON.stringify(result, null, 2));
    const row = (name: string, r: { cold: number; warm: Stats }) =>
      `| ${name} | ${String(r.warm.p50)} | ${String(r.warm.max)} | ${String(r.cold)} |`;
    // Where the run page's time goes: the API calls made before its slowest part showed.
    const apiRows = Object.entries(ledger.api).map(
      ([k, c]) => `| ${k} | ${String(c.end.n)} | ${String(c.duration.p50)} | ${String(c.end.p50)} |`,
    );
    console.log(
      [
        '',
        `| first render (${String(total)} runs in the database; run of ${String(steps)} steps, ${String(detail.lastEventSeq)} events) | median ms | slowest ms | first load ms |`,
        '|---|---|---|---|',
        row('runs page: first 50 rows', runsPage),
        row('run page: steps table', stepsTable),
        row('run page: timeline', timeline),
        row('run page: graph laid out and drawn', graph),
        row('run page: ledger read and chain verified', ledger),
        '',
        `runs list plans: ${JSON.stringify(plans)}`,
        '',
        '| run page API call (until the ledger is verified) | calls | median duration ms | median answered at ms |',
        '|---|---|---|---|',
        ...apiRows,
      ].join('\n'),
    );
  } finally {
    for (const c of cleanups) await c();
  }
}
