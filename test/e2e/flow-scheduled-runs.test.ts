import { sql } from 'kysely';
import { verifyChain } from '../../src/modules/runs/run-events';
import { startTestApp, type TestApp } from '../support/test-app';
import { chainOf, runEvents, waitForRun } from './runs-support';

type Run = { runId: string; status: string; priority: number; notBefore: string | null; steps: { status: string }[] };

/** Run priorities and notBefore through the API: validation, the scheduled state, cancel, tenancy. */
describe('run priority and notBefore', () => {
  let app: TestApp;
  let as: { token: string; tenantId: string };
  let seq = 0;
  const create = (body: Record<string, unknown>, who = as) =>
    app.request('POST', '/api/v1/runs', { as: who, body: { dagId: 'later', runToken: `t${seq++}`, ...body } });
  const get = async (runId: string, who = as) => app.request('GET', `/api/v1/runs/${runId}`, { as: who });
  const count = async () =>
    app.ordo.database.withSystem(
      async (tx) => (await sql<{ n: number }>`select count(*)::int as n from run`.execute(tx)).rows[0].n,
    );
  const inSeconds = (s: number) => new Date(Date.now() + s * 1000).toISOString();

  beforeAll(async () => {
    app = await startTestApp({ ORDO_ROLES: 'api,worker,scheduler' });
    as = { token: app.adminToken, tenantId: app.tenantId };
    const publish = (body: unknown) => app.request('POST', '/api/v1/dags', { as, body });
    expect(
      (
        await publish({
          id: 'later',
          steps: [
            { id: 'a', plugin: 'noop' },
            { id: 'b', plugin: 'noop', dependsOn: ['a'], priority: 8 },
          ],
        })
      ).status,
    ).toBe(201);
    expect(
      (
        await publish({
          id: 'limited',
          constraints: { maxConcurrentRuns: { limit: 1, action: 'queue' } },
          steps: [{ id: 'a', plugin: 'noop' }],
        })
      ).status,
    ).toBe(201);
  });
  afterAll(async () => app?.close());

  it('parks a run with a future notBefore as scheduled, then starts it at that time through its job', async () => {
    const notBefore = inSeconds(2);
    const r = await create({ notBefore, priority: 7 });
    expect(r.status).toBe(201);
    expect(r.body.status).toBe('scheduled');
    const job = await app.ordo.database.withSystem(
      async (tx) =>
        (
          await sql<{
            run_at: Date;
          }>`select run_at from graphile_worker.jobs where key = ${`start:${as.tenantId}:${r.body.runId}`}`.execute(tx)
        ).rows,
    );
    expect(job.map((j) => j.run_at.toISOString())).toEqual([notBefore]);

    const done = (await waitForRun(app, as, r.body.runId as string)) as Run;
    expect(done).toMatchObject({ status: 'succeeded', priority: 7, notBefore });
    const ev = await runEvents(app, as, r.body.runId as string);
    expect(ev.map((e) => e.type).slice(0, 5)).toEqual([
      'run.created',
      'run.scheduled',
      'run.queued',
      'step.queued',
      'run.running',
    ]);
    expect(ev[0].data).toMatchObject({ priority: 7, notBefore });
    expect(ev[1].data).toEqual({ notBefore });
    expect(verifyChain(chainOf(ev, as.tenantId, r.body.runId as string))).toEqual({ ok: true });
  });

  it('lists and shows a scheduled run with its notBefore, and keeps creation idempotent on its run token', async () => {
    const notBefore = inSeconds(3600);
    const body = { notBefore, runToken: 'idem-later' };
    const first = await create(body);
    const again = await create(body);
    expect(first.body).toMatchObject({ created: true, status: 'scheduled' });
    expect(again.body).toMatchObject({ created: false, status: 'scheduled', runId: first.body.runId });
    const shown = (await get(first.body.runId as string)).body as Run;
    expect(shown).toMatchObject({ status: 'scheduled', notBefore, priority: 5 });
    expect(shown.steps.map((s) => s.status)).toEqual(['pending', 'pending']);
    const list = await app.request('GET', '/api/v1/runs?status=scheduled', { as });
    expect((list.body.items as Run[]).map((x) => x.runId)).toContain(first.body.runId);
    const ndjson = await app.request('GET', '/api/v1/runs?status=scheduled', {
      as,
      headers: { accept: 'application/x-ndjson' },
    });
    expect(ndjson.text).toContain(`"notBefore":"${notBefore}"`);
  });

  it('starts a run with a notBefore now or in the past at once', async () => {
    const r = await create({ notBefore: inSeconds(-60) });
    expect(r.status).toBe(201);
    expect(r.body.status).not.toBe('scheduled');
    expect(((await waitForRun(app, as, r.body.runId as string)) as Run).status).toBe('succeeded');
    const types = (await runEvents(app, as, r.body.runId as string)).map((e) => e.type);
    expect(types).not.toContain('run.scheduled');
  });

  it('cancels a scheduled run; its start job then does nothing', async () => {
    const r = await create({ notBefore: inSeconds(3600) });
    const c = await app.request('POST', `/api/v1/runs/${r.body.runId}/cancel`, { as });
    expect(c.status).toBe(200);
    expect(c.body.status).toBe('cancelled');
    await app.ordo.database.withSystem((tx) =>
      sql`select ordo_start_scheduled(${as.tenantId}, ${r.body.runId}::uuid)`.execute(tx),
    );
    const shown = (await get(r.body.runId as string)).body as Run;
    expect(shown.status).toBe('cancelled');
    expect(shown.steps.map((s) => s.status)).toEqual(['cancelled', 'cancelled']);
  });

  it("refuses another tenant's reads and cancel of a scheduled run with 404, changing nothing", async () => {
    const r = await create({ notBefore: inSeconds(3600) });
    const other = await app.tenant('sched-other');
    expect((await get(r.body.runId as string, other)).status).toBe(404);
    const c = await app.request('POST', `/api/v1/runs/${r.body.runId}/cancel`, { as: other });
    expect(c.status).toBe(404);
    expect(c.body.error.code).toBe('RUN_NOT_FOUND');
    const list = await app.request('GET', '/api/v1/runs?status=scheduled', { as: other });
    expect(list.body.items).toEqual([]);
    expect(((await get(r.body.runId as string)).body as Run).status).toBe('scheduled');
  });

  it('refuses a bad priority or notBefore with 400 and writes nothing', async () => {
    const before = await count();
    for (const priority of [10, -1, 1.5, '5']) {
      const r = await create({ priority });
      expect(r.status).toBe(400);
      expect(r.body.error.code).toBe('VALIDATION_FAILED');
      expect(r.body.error.message).toContain('priority');
    }
    for (const notBefore of ['tomorrow', '2030-01-01', '2030-01-01T00:00:00']) {
      const r = await create({ notBefore });
      expect(r.status).toBe(400);
      expect(r.body.error.code).toBe('VALIDATION_FAILED');
      expect(r.body.error.message).toContain('notBefore');
    }
    const far = await create({ notBefore: inSeconds(400 * 24 * 3600) });
    expect(far.status).toBe(400);
    expect(far.body.error.code).toBe('NOT_BEFORE_TOO_FAR');
    const limited = await create({ dagId: 'limited', notBefore: inSeconds(3600) });
    expect(limited.status).toBe(400);
    expect(limited.body.error.code).toBe('NOT_BEFORE_UNSUPPORTED');
    expect(await count()).toBe(before);
  });

  it('refuses a step priority out of 0-9 at publish', async () => {
    const r = await app.request('POST', '/api/v1/dags', {
      as,
      body: { id: 'badprio', steps: [{ id: 'a', plugin: 'noop', priority: 12 }] },
    });
    expect(r.status).toBe(400);
  });

  it('shows priority and notBefore in the OpenAPI document', async () => {
    const doc = await app.request('GET', '/api/v1/openapi.json');
    const req = doc.body.components.schemas.CreateRunRequest.properties;
    expect(req.priority).toMatchObject({ type: 'integer', minimum: 0, maximum: 9 });
    expect(req.notBefore).toMatchObject({ type: 'string', format: 'date-time' });
    expect(doc.body.components.schemas.Run.properties.status.enum).toContain('scheduled');
  });
});
