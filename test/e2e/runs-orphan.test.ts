import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { buildPrivateDist } from '../support/dist';
import { startTestApp, type TestApp } from '../support/test-app';
import { publishDag, waitForRun } from './runs-support';

const root = path.resolve(__dirname, '../..');

/** A worker-only Ordo process on the test database (built code, real process). */
function spawnWorker(ownerUrl: string, home: string): ChildProcess {
  const child = spawn(path.join(root, 'node_modules/.bin/node'), [buildPrivateDist().main], {
    cwd: root,
    env: {
      PATH: process.env.PATH,
      ORDO_ROLES: 'worker',
      DATABASE_URL: ownerUrl,
      ORDO_HOME: home,
      HOST: '127.0.0.1',
      PORT: '0',
      ORDO_LEASE_TTL_MS: '1000',
      LOG_LEVEL: 'warn',
    },
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  return child;
}

describe('a worker killed mid-step (separate process, SIGKILL)', () => {
  let app: TestApp;
  let owner: pg.Client;
  const children: ChildProcess[] = [];
  const homes: string[] = [];

  beforeAll(async () => {
    // This process serves the API and runs the reaper; only the spawned processes execute steps.
    app = await startTestApp({
      ORDO_ROLES: 'api,scheduler',
      ORDO_REAPER_INTERVAL_MS: '200',
      ORDO_LEASE_TTL_MS: '1000',
    });
    owner = new pg.Client({ connectionString: app.testDb.ownerUrl });
    await owner.connect();
  }, 120_000);
  afterAll(async () => {
    for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
    await owner.end();
    await app.close();
    for (const h of homes) fs.rmSync(h, { recursive: true, force: true });
  });

  const home = () => {
    const h = fs.mkdtempSync(path.join(os.tmpdir(), 'ordo-worker-'));
    homes.push(h);
    return h;
  };

  it('orphans the step, retries it once on another worker and completes with exactly one successful attempt', async () => {
    const as = { token: app.adminToken, tenantId: app.tenantId };
    await publishDag(app, app.tenantId, {
      id: 'killme',
      steps: [
        {
          id: 'slow',
          plugin: 'noop',
          with: { sleepMs: 3_000, output: { ok: true } },
          retry: { maxRetries: 1, initialDelay: 50 },
        },
        { id: 'after', plugin: 'noop', dependsOn: ['slow'] },
      ],
    });
    const first = spawnWorker(app.testDb.ownerUrl, home());
    children.push(first);
    const r = await app.request('POST', '/api/v1/runs', {
      as,
      body: { dagId: 'killme', inputs: {}, runToken: 'kill' },
    });
    expect(r.status).toBe(201);
    const runId = r.body.runId as string;

    // Wait until the first worker runs the step, then kill it without a chance to clean up.
    let workerId = '';
    for (let i = 0; i < 300 && !workerId; i++) {
      const rows = (
        await owner.query<{ worker_id: string }>(
          `select worker_id from attempt where run_id = $1 and step_id = 'slow'`,
          [runId],
        )
      ).rows;
      workerId = rows[0]?.worker_id ?? '';
      if (!workerId) await new Promise((res) => setTimeout(res, 50));
    }
    expect(workerId).toContain(`:${first.pid}:`);
    first.kill('SIGKILL');
    await new Promise((res) => first.once('exit', res));

    // The reaper finds the expired lease: orphaned, then retrying.
    let status = '';
    for (let i = 0; i < 200 && status !== 'retrying' && status !== 'queued'; i++) {
      status = (
        await owner.query<{ status: string }>(`select status from step where run_id = $1 and step_id = 'slow'`, [runId])
      ).rows[0].status;
      if (status !== 'retrying') await new Promise((res) => setTimeout(res, 50));
    }
    expect(['retrying', 'queued']).toContain(status);

    const second = spawnWorker(app.testDb.ownerUrl, home());
    children.push(second);
    const run = await waitForRun(app, as, runId, 30_000);
    expect(run.status).toBe('succeeded');

    const attempts = await app.request('GET', `/api/v1/runs/${runId}/steps/slow/attempts`, { as });
    expect(attempts.body.items.map((a: { attempt: number; status: string }) => [a.attempt, a.status])).toEqual([
      [1, 'orphaned'],
      [2, 'succeeded'],
    ]);
    expect(attempts.body.items[1].workerId).toContain(`:${second.pid}:`);
    const ev = await app.request('GET', `/api/v1/runs/${runId}/events?limit=1000`, { as });
    const types = (ev.body.items as { type: string; stepId: string | null }[])
      .filter((e) => e.stepId === 'slow')
      .map((e) => e.type);
    expect(types).toEqual([
      'step.queued',
      'step.running',
      'step.orphaned',
      'step.retrying',
      'step.queued',
      'step.running',
      'step.succeeded',
    ]);
    expect(types.filter((t) => t === 'step.succeeded')).toHaveLength(1);
    const after = await app.request('GET', `/api/v1/runs/${runId}/steps/after/attempts`, { as });
    expect(after.body.items).toHaveLength(1);
    second.kill('SIGTERM');
    await new Promise((res) => second.once('exit', res));
  }, 90_000);
});
