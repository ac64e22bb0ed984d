import pg from 'pg';
import pino from 'pino';
import { LimitHits } from '../../src/modules/plans/limit-hits';
import { RunsRepository } from '../../src/modules/runs/runs.repository';
import { RunsService } from '../../src/modules/runs/runs.service';
import { ManualClock } from '../../src/modules/scheduler/clock';
import { RunsScheduleRunner } from '../../src/modules/scheduler/runs-schedule-runner';
import { SchedulerLoop } from '../../src/modules/scheduler/scheduler-loop';
import { SchedulesRepository } from '../../src/modules/scheduler/schedules.repository';
import { startOrdo, type RunningOrdo } from '../../src/ordo';
import { startTestApp, type TestApp, type TestResponse } from '../support/test-app';

type As = { token: string; tenantId: string };

/** Puts a new tenant on a plan of its own with `limits`; returns its admin credentials. */
async function planned(app: TestApp, tenant: string, limits: Record<string, number>): Promise<As> {
  const as = await app.tenant(tenant);
  const op = { token: app.platformToken };
  const p = await app.request('POST', '/api/v1/plans', { as: op, body: { id: `p-${tenant}`, limits } });
  expect(p.status).toBe(201);
  const a = await app.request('PUT', `/api/v1/tenants/${tenant}/plan`, { as: op, body: { planId: `p-${tenant}` } });
  expect(a.status).toBe(200);
  return as;
}

async function publish(app: TestApp, as: As, def: Record<string, unknown>): Promise<void> {
  const r = await app.request('POST', '/api/v1/dags', { as, body: def });
  expect(r.status).toBe(201);
}

const quotaError = (r: TestResponse) => ({
  status: r.status,
  code: r.body?.error?.code,
  details: r.body?.error?.details,
});

/** Quotas at run creation, on schedules, for stored artifacts and exports; no worker runs the runs here. */
describe('plan quotas (api only: runs stay queued)', () => {
  let app: TestApp;
  let owner: pg.Client;
  const runsOf = async (tenant: string) =>
    Number(
      (await owner.query<{ n: string }>('select count(*) as n from run where tenant_id = $1', [tenant])).rows[0].n,
    );
  const create = (as: As, runToken: string, dagId = 'one', extra: Record<string, unknown> = {}) =>
    app.request('POST', '/api/v1/runs', { as, body: { dagId, inputs: {}, runToken, ...extra } });
  const usage = async (as: As) => (await app.request('GET', '/api/v1/usage', { as })).body.usage;

  beforeAll(async () => {
    app = await startTestApp();
    owner = new pg.Client({ connectionString: app.testDb.ownerUrl });
    await owner.connect();
  });
  afterAll(async () => {
    await owner?.end();
    await app?.close();
  });

  it('refuses the run past monthlyRuns with 429 naming the limit and writes nothing; a repeated token is not a creation', async () => {
    const as = await planned(app, 'q-monthly', { monthlyRuns: 3 });
    await publish(app, as, { id: 'one', steps: [{ id: 'a', plugin: 'noop' }] });
    for (const t of ['t1', 't2', 't3']) expect((await create(as, t)).status).toBe(201);
    const over = await create(as, 't4');
    expect(quotaError(over)).toEqual({
      status: 429,
      code: 'QUOTA_EXCEEDED',
      details: { limit: 'monthlyRuns', value: 3, current: 3 },
    });
    expect(over.body.error.message).toContain('monthlyRuns');
    expect(await runsOf('q-monthly')).toBe(3);
    // The same token and inputs again answers the existing run, at the limit too.
    const again = await create(as, 't2');
    expect(again.status).toBe(200);
    expect(again.body.created).toBe(false);
    expect((await usage(as)).runsThisPeriod).toBe(3);

    // An operator's reset opens the period again.
    const reset = await app.request('POST', '/api/v1/tenants/q-monthly/usage/reset', {
      as: { token: app.platformToken },
      body: { reason: 'test' },
    });
    expect(reset.status).toBe(200);
    expect((await create(as, 't4')).status).toBe(201);
    expect((await usage(as)).runsThisPeriod).toBe(1);
  });

  it('keeps no answer for an Idempotency-Key refused by a quota: the same key passes once there is room', async () => {
    const as = await planned(app, 'q-idem', { monthlyRuns: 1 });
    await publish(app, as, { id: 'one', steps: [{ id: 'a', plugin: 'noop' }] });
    expect((await create(as, 'i1')).status).toBe(201);
    const send = () =>
      app.request('POST', '/api/v1/runs', {
        as,
        headers: { 'idempotency-key': 'idem-quota-1' },
        body: { dagId: 'one', inputs: {}, runToken: 'i2' },
      });
    expect(quotaError(await send()).status).toBe(429);
    const keys = await owner.query('select 1 from idempotency_key where tenant_id = $1', ['q-idem']);
    expect(keys.rows).toEqual([]);
    await app.request('POST', '/api/v1/tenants/q-idem/usage/reset', {
      as: { token: app.platformToken },
      body: { reason: 'test' },
    });
    const passed = await send();
    expect(passed.status).toBe(201);
    const replayed = await send();
    expect({ status: replayed.status, runId: replayed.body.runId }).toEqual({ status: 201, runId: passed.body.runId });
  });

  it('counts replays against monthlyRuns and refuses one over it', async () => {
    const as = await planned(app, 'q-replay', { monthlyRuns: 2 });
    await publish(app, as, { id: 'one', steps: [{ id: 'a', plugin: 'noop' }] });
    const first = await create(as, 'r1');
    expect(first.status).toBe(201);
    const replay = await app.request('POST', `/api/v1/runs/${first.body.runId}/replay`, { as });
    expect(replay.status).toBe(201);
    expect((await usage(as)).runsThisPeriod).toBe(2);
    const refused = await app.request('POST', `/api/v1/runs/${first.body.runId}/replay`, { as });
    expect(quotaError(refused)).toEqual({
      status: 429,
      code: 'QUOTA_EXCEEDED',
      details: { limit: 'monthlyRuns', value: 2, current: 2 },
    });
    expect(await runsOf('q-replay')).toBe(2);
    // Nothing of the refused replay reached the original run's events either.
    const events = await app.request('GET', `/api/v1/runs/${first.body.runId}/events`, { as });
    expect((events.body.items as { type: string }[]).filter((e) => e.type === 'run.replayed')).toHaveLength(1);
  });

  it('refuses a run past maxConcurrentRuns until one ends (scheduled runs count as open)', async () => {
    const as = await planned(app, 'q-open', { maxConcurrentRuns: 2 });
    await publish(app, as, { id: 'one', steps: [{ id: 'a', plugin: 'noop' }] });
    const a = await create(as, 'o1');
    expect(a.status).toBe(201);
    const later = new Date(Date.now() + 3600_000).toISOString();
    expect((await create(as, 'o2', 'one', { notBefore: later })).status).toBe(201);
    const over = await create(as, 'o3');
    expect(quotaError(over)).toEqual({
      status: 429,
      code: 'QUOTA_EXCEEDED',
      details: { limit: 'maxConcurrentRuns', value: 2, current: 2 },
    });
    expect(await runsOf('q-open')).toBe(2);
    expect((await app.request('POST', `/api/v1/runs/${a.body.runId}/cancel`, { as })).status).toBe(200);
    expect((await create(as, 'o3')).status).toBe(201);
    expect((await usage(as)).concurrentRuns).toBe(2);
  });

  it('refuses a run whose ready steps would pass maxQueuedSteps', async () => {
    const as = await planned(app, 'q-queued', { maxQueuedSteps: 3 });
    await publish(app, as, {
      id: 'two',
      steps: [
        { id: 'a', plugin: 'noop' },
        { id: 'b', plugin: 'noop' },
      ],
    });
    expect((await create(as, 'q1', 'two')).status).toBe(201);
    const over = await create(as, 'q2', 'two');
    expect(quotaError(over)).toEqual({
      status: 429,
      code: 'QUOTA_EXCEEDED',
      details: { limit: 'maxQueuedSteps', value: 3, current: 2 },
    });
    expect((await usage(as)).queuedSteps).toBe(2);
    expect(await runsOf('q-queued')).toBe(1);
  });

  it('creates exactly monthlyRuns runs out of many concurrent creators on two api processes', async () => {
    const as = await planned(app, 'q-race', { monthlyRuns: 10 });
    await publish(app, as, { id: 'one', steps: [{ id: 'a', plugin: 'noop' }] });
    let other: RunningOrdo | undefined;
    try {
      other = await startOrdo(app.config, pino({ level: 'silent' }), {
        appUrl: app.testDb.appUrl,
        systemUrl: app.testDb.systemUrl,
        ownerUrl: app.testDb.ownerUrl,
      });
      const urls = [app.url, other.url];
      const results = await Promise.all(
        Array.from({ length: 40 }, async (_, i) => {
          const r = await fetch(`${urls[i % 2]}/api/v1/runs`, {
            method: 'POST',
            headers: {
              authorization: `Bearer ${as.token}`,
              'x-tenant-id': as.tenantId,
              'content-type': 'application/json',
            },
            body: JSON.stringify({ dagId: 'one', inputs: {}, runToken: `race-${i}` }),
          });
          const body = (await r.json()) as { error?: { code: string } };
          return { status: r.status, code: body.error?.code };
        }),
      );
      const created = results.filter((r) => r.status === 201).length;
      const refused = results.filter((r) => r.status === 429 && r.code === 'QUOTA_EXCEEDED').length;
      expect({ created, refused }).toEqual({ created: 10, refused: 30 });
      expect(await runsOf('q-race')).toBe(10);
      expect((await usage(as)).runsThisPeriod).toBe(10);
    } finally {
      await other?.close();
    }
  });

  it('records a schedule fire over the quota as a skipped fire naming the limit', async () => {
    const as = await planned(app, 'q-sched', { monthlyRuns: 1 });
    await publish(app, as, { id: 'one', steps: [{ id: 'a', plugin: 'noop' }] });
    const s = await app.request('POST', '/api/v1/schedules', {
      as,
      body: { dagId: 'one', cron: '* * * * * *', timezone: 'UTC' },
    });
    expect(s.status).toBe(201);
    const clock = new ManualClock(new Date(Date.now() + 2500));
    const db = app.ordo.database;
    const loop = new SchedulerLoop(
      db,
      new SchedulesRepository(),
      new RunsScheduleRunner(
        db,
        app.ordo.app.get(RunsService, { strict: false }),
        new RunsRepository(),
        app.ordo.app.get(LimitHits, { strict: false }),
      ),
      clock,
    );
    const done = await loop.tick();
    expect(done.fires).toBeGreaterThanOrEqual(2);
    const fires = await app.request('GET', `/api/v1/schedules/${s.body.id}/fires?limit=100`, { as });
    const items = (fires.body.items as { outcome: string; runId: string | null; error: string | null }[]).sort((x, y) =>
      x.outcome.localeCompare(y.outcome),
    );
    expect(items.filter((f) => f.outcome === 'created')).toHaveLength(1);
    const skipped = items.filter((f) => f.outcome === 'skipped');
    expect(skipped.length).toBe(items.length - 1);
    for (const f of skipped) {
      expect(f.runId).toBeNull();
      expect(f.error).toMatch(/^QUOTA_EXCEEDED: .*monthlyRuns/);
    }
    expect(items.filter((f) => f.outcome === 'failed')).toEqual([]);
    expect(await runsOf('q-sched')).toBe(1);
    // Each skipped fire is a hit of the limit, as a refused request is.
    await app.ordo.app.get(LimitHits, { strict: false }).flush();
    const hits = await owner.query<{ hits: string }>(
      `select sum(hits)::text as hits from limit_hit where tenant_id = 'q-sched' and limit_name = 'monthlyRuns'`,
    );
    expect(Number(hits.rows[0].hits)).toBe(skipped.length);
  });

  it('takes no lock and counts nothing for a tenant without a plan', async () => {
    const as = await app.tenant('q-free');
    await publish(app, as, { id: 'one', steps: [{ id: 'a', plugin: 'noop' }] });
    for (let i = 0; i < 3; i++) expect((await create(as, `f${i}`)).status).toBe(201);
    const rows = await owner.query('select * from tenant_usage where tenant_id = $1', ['q-free']);
    expect(rows.rows).toEqual([]);
    const u = await app.request('GET', '/api/v1/usage', { as });
    expect(u.body).toMatchObject({ plan: null, limits: {}, usage: { runsThisPeriod: 3, concurrentRuns: 3 } });
    expect(u.body.period.timeZone).toBe('UTC');
  });

  it('starts the count of a tenant that gets a plan mid-month at the runs it created this month', async () => {
    const as = await app.tenant('q-late');
    await publish(app, as, { id: 'one', steps: [{ id: 'a', plugin: 'noop' }] });
    for (let i = 0; i < 2; i++) expect((await create(as, `l${i}`)).status).toBe(201);
    const op = { token: app.platformToken };
    await app.request('POST', '/api/v1/plans', { as: op, body: { id: 'p-late', limits: { monthlyRuns: 3 } } });
    expect(
      (await app.request('PUT', '/api/v1/tenants/q-late/plan', { as: op, body: { planId: 'p-late' } })).status,
    ).toBe(200);
    expect((await usage(as)).runsThisPeriod).toBe(2);
    expect((await create(as, 'l2')).status).toBe(201);
    expect((await create(as, 'l3')).status).toBe(429);
  });

  it('refuses an export larger than maxExportBytes with 429 before sending anything, and serves one within it', async () => {
    const as = await planned(app, 'q-export', { maxExportBytes: 1000 });
    await publish(app, as, { id: 'one', steps: [{ id: 'a', plugin: 'noop' }] });
    for (let i = 0; i < 3; i++) expect((await create(as, `e${i}`)).status).toBe(201);
    const r = await app.request('GET', '/api/v1/export', { as });
    expect(r.status).toBe(429);
    expect(r.headers.get('content-type')).toContain('application/json');
    expect(r.body.error.code).toBe('QUOTA_EXCEEDED');
    expect(r.body.error.details).toMatchObject({ limit: 'maxExportBytes', value: 1000 });
    expect(r.body.error.details.current).toBeGreaterThan(1000);

    const op = { token: app.platformToken };
    await app.request('PUT', '/api/v1/tenants/q-export/limits', {
      as: op,
      body: { overrides: { maxExportBytes: 10_000_000 }, reason: 'bigger exports' },
    });
    // (Limits are cached per process for up to two seconds; this process dropped them on the change.)
    const ok = await app.request('GET', '/api/v1/export', { as });
    expect(ok.status).toBe(200);
    const lines = ok.text.trim().split('\n');
    expect(JSON.parse(lines[lines.length - 1]).type).toBe('manifest');
    expect(Buffer.byteLength(ok.text)).toBeGreaterThan(1000);
  });
});

/** Quotas that need steps to run: stored artifact bytes, and child runs of `dag` steps. */
describe('plan quotas (with a worker)', () => {
  let app: TestApp;
  const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
  const finished = async (as: As, runId: string) => {
    const deadline = Date.now() + 30_000;
    for (;;) {
      const r = await app.request('GET', `/api/v1/runs/${runId}`, { as });
      if (['succeeded', 'failed', 'cancelled'].includes(r.body.status as string)) return r.body;
      if (Date.now() > deadline) throw new Error(`run ${runId} did not finish: ${r.body.status}`);
      await sleep(100);
    }
  };

  beforeAll(async () => {
    app = await startTestApp({ ORDO_ROLES: 'api,worker' });
  });
  afterAll(async () => app?.close());

  it('fails a step whose outputs would pass maxArtifactBytes with QUOTA_EXCEEDED, without retrying it', async () => {
    const as = await planned(app, 'q-bytes', { maxArtifactBytes: 3000 });
    await publish(app, as, {
      id: 'small',
      steps: [{ id: 'a', plugin: 'noop', with: { output: { v: 'x'.repeat(100) } } }],
    });
    await publish(app, as, {
      id: 'big',
      steps: [{ id: 'a', plugin: 'noop', retry: { maxRetries: 3 }, with: { output: { v: 'y'.repeat(5000) } } }],
    });
    const small = await app.request('POST', '/api/v1/runs', {
      as,
      body: { dagId: 'small', inputs: {}, runToken: 's' },
    });
    expect((await finished(as, small.body.runId as string)).status).toBe('succeeded');
    const stored = (await app.request('GET', '/api/v1/usage', { as })).body.usage.artifactBytes as number;
    expect(stored).toBeGreaterThan(100);

    const big = await app.request('POST', '/api/v1/runs', { as, body: { dagId: 'big', inputs: {}, runToken: 'b' } });
    const run = await finished(as, big.body.runId as string);
    expect(run.status).toBe('failed');
    const step = (run.steps as { stepId: string; attempts: number; error: { code: string; message: string } }[])[0];
    expect(step.error.code).toBe('QUOTA_EXCEEDED');
    expect(step.error.message).toContain('maxArtifactBytes');
    expect(step.attempts).toBe(1);
    // The refused outputs were not stored.
    const after = (await app.request('GET', '/api/v1/usage', { as })).body.usage.artifactBytes as number;
    expect(after).toBeLessThan(3000);
  });

  it('does not count or refuse the child runs of dag steps: only the top-level run is a creation', async () => {
    const as = await planned(app, 'q-child', { monthlyRuns: 1, maxConcurrentRuns: 1 });
    await publish(app, as, { id: 'child', steps: [{ id: 'c', plugin: 'noop' }] });
    await publish(app, as, { id: 'parent', steps: [{ id: 'sub', plugin: 'dag', with: { dag: 'child' } }] });
    const r = await app.request('POST', '/api/v1/runs', { as, body: { dagId: 'parent', inputs: {}, runToken: 'p' } });
    expect(r.status).toBe(201);
    const run = await finished(as, r.body.runId as string);
    expect(run.status).toBe('succeeded');
    expect((run.steps as { childRunId?: string }[])[0].childRunId).toEqual(expect.any(String));
    expect((await app.request('GET', '/api/v1/usage', { as })).body.usage.runsThisPeriod).toBe(1);
  });
});
