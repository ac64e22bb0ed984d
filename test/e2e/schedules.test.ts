import { createHash } from 'node:crypto';
import type { Database } from '../../src/core/database/database';
import { dagDefinition } from '../../src/modules/dags/dag-definition';
import { DagsRepository } from '../../src/modules/dags/dags.repository';
import { RunsRepository } from '../../src/modules/runs/runs.repository';
import { RunsService } from '../../src/modules/runs/runs.service';
import { SystemClock } from '../../src/modules/scheduler/clock';
import { RunsScheduleRunner } from '../../src/modules/scheduler/runs-schedule-runner';
import { SchedulerLoop } from '../../src/modules/scheduler/scheduler-loop';
import { SchedulesRepository } from '../../src/modules/scheduler/schedules.repository';
import { startTestApp, type TestApp } from '../support/test-app';

async function publishDag(
  db: Database,
  tenantId: string,
  dagId: string,
  inputs?: Record<string, unknown>,
): Promise<void> {
  const repo = new DagsRepository();
  const definition = dagDefinition.parse({
    id: dagId,
    ...(inputs && { inputs }),
    steps: [{ id: 'a', plugin: 'noop' }],
  });
  await db.withTenant(tenantId, async (tx) => {
    const latest = await repo.lockDag(tx, dagId);
    await repo.insertVersion(tx, {
      dagId,
      version: latest + 1,
      contentHash: createHash('sha256')
        .update(`${dagId}:${latest + 1}`)
        .digest('hex'),
      definition,
      sourceFormat: 'json',
      owner: 'test',
      signature: null,
      bundleHash: null,
    });
  });
}

describe('schedules API', () => {
  let app: TestApp;
  let admin: { token: string; tenantId: string };
  let reader: { token: string; tenantId: string };
  let b: { token: string; tenantId: string };
  const base = { dagId: 'nightly', cron: '30 2 * * *', timezone: 'Europe/Berlin' };

  beforeAll(async () => {
    app = await startTestApp();
    admin = { token: app.adminToken, tenantId: app.tenantId };
    reader = { token: await app.token(app.tenantId, ['orchestrator:read']), tenantId: app.tenantId };
    b = await app.tenant('tenant-b');
    await publishDag(app.testDb.db, app.tenantId, 'nightly');
    await publishDag(app.testDb.db, app.tenantId, 'other');
    await publishDag(app.testDb.db, app.tenantId, 'typed', {
      type: 'object',
      properties: { day: { type: 'string' } },
      required: ['day'],
      additionalProperties: false,
    });
    await publishDag(app.testDb.db, app.tenantId, 'other');
    await app.testDb.db.withTenant(app.tenantId, (tx) =>
      new DagsRepository().setStatus(tx, 'other', 2, 'disabled', 'test'),
    );
  });
  afterAll(async () => app.close());

  const create = (body: unknown, as = admin) => app.request('POST', '/api/v1/schedules', { as, body });
  const count = async (tenantId: string) =>
    (
      await app.testDb.db.withTenant(tenantId, (tx) =>
        tx
          .selectFrom('schedule')
          .select((eb) => eb.fn.countAll<number>().as('n'))
          .executeTakeFirstOrThrow(),
      )
    ).n;

  it('creates a schedule with defaults and its first fire time', async () => {
    const r = await create({ ...base, inputs: { day: 'today' } });
    expect(r.status).toBe(201);
    expect(r.body).toMatchObject({
      dagId: 'nightly',
      version: null,
      cron: '30 2 * * *',
      timezone: 'Europe/Berlin',
      inputs: { day: 'today' },
      catchUp: 'none',
      overlap: 'allow',
      paused: false,
      lastRunId: null,
    });
    expect(new Date(r.body.nextFireAt).getTime()).toBeGreaterThan(Date.now());
    const got = await app.request('GET', `/api/v1/schedules/${r.body.id}`, { as: reader });
    expect(got.status).toBe(200);
    expect(got.body).toEqual(r.body);
  });

  it('previews the next fire times of a schedule in UTC and local time', async () => {
    const s = await create({ ...base, cron: '0 0 12 * * *', timezone: 'America/New_York' });
    const r = await app.request('GET', `/api/v1/schedules/${s.body.id}/next?count=3`, { as: reader });
    expect(r.status).toBe(200);
    expect(r.body.items).toHaveLength(3);
    for (const item of r.body.items) {
      expect(item.local).toMatch(/T12:00:00-0[45]:00$/);
      expect(new Date(item.utc).getTime()).toBeGreaterThan(Date.now());
    }
  });

  it('previews a cron expression without a schedule, across the DST change', async () => {
    const r = await app.request(
      'GET',
      `/api/v1/schedules/preview?cron=${encodeURIComponent('0 */1 * * *')}&timezone=UTC&count=100`,
      {
        as: reader,
      },
    );
    expect(r.status).toBe(200);
    expect(r.body.items).toHaveLength(100);
    const hours = r.body.items.map((i: { utc: string }) => Date.parse(i.utc));
    expect(hours.slice(1).every((h: number, i: number) => h - hours[i] === 3_600_000)).toBe(true);
  });

  it.each([
    [{ ...base, cron: '61 * * * *' }, 400, 'INVALID_CRON'],
    [{ ...base, cron: '* * *' }, 400, 'INVALID_CRON'],
    [{ ...base, cron: '0 0 30 2 *' }, 400, 'INVALID_CRON'],
    [{ ...base, timezone: 'Mars/Olympus_Mons' }, 400, 'INVALID_TIMEZONE'],
    [{ ...base, dagId: 'missing' }, 404, 'DAG_NOT_FOUND'],
    [{ ...base, version: 7 }, 404, 'DAG_NOT_FOUND'],
    [{ ...base, dagId: 'typed', inputs: { day: 3 } }, 400, 'INVALID_INPUTS'],
    [{ ...base, dagId: 'typed' }, 400, 'INVALID_INPUTS'],
    [{ ...base, dagId: 'other', version: 2 }, 409, 'DAG_VERSION_DISABLED'],
    [{ ...base, catchUp: 'some' }, 400, undefined],
    [{ ...base, overlap: 'replace' }, 400, undefined],
    [{ ...base, surprise: true }, 400, undefined],
    [{ cron: '* * * * *', timezone: 'UTC' }, 400, undefined],
  ])('rejects %j with %i and writes nothing', async (body, status, code) => {
    const before = await count(app.tenantId);
    const r = await create(body);
    expect(r.status).toBe(status);
    if (code) expect(r.body.error.code).toBe(code);
    expect(await count(app.tenantId)).toBe(before);
  });

  it('rejects a preview count outside 1..100 and a bad zone in preview', async () => {
    const s = await create(base);
    for (const n of [0, 101, -1]) {
      const r = await app.request('GET', `/api/v1/schedules/${s.body.id}/next?count=${n}`, { as: reader });
      expect(r.status).toBe(400);
    }
    const r = await app.request(
      'GET',
      `/api/v1/schedules/preview?cron=${encodeURIComponent('* * * * *')}&timezone=Nowhere/Here`,
      { as: reader },
    );
    expect(r.status).toBe(400);
    expect(r.body.error.code).toBe('INVALID_TIMEZONE');
  });

  it('updates a schedule, revalidating fields and recomputing the next fire time for a new expression', async () => {
    const s = await create(base);
    const bad = await app.request('PATCH', `/api/v1/schedules/${s.body.id}`, {
      as: admin,
      body: { timezone: 'Not/AZone' },
    });
    expect(bad.status).toBe(400);
    const badDag = await app.request('PATCH', `/api/v1/schedules/${s.body.id}`, {
      as: admin,
      body: { dagId: 'missing' },
    });
    expect(badDag.status).toBe(404);
    expect((await app.request('GET', `/api/v1/schedules/${s.body.id}`, { as: reader })).body).toEqual(s.body);

    const r = await app.request('PATCH', `/api/v1/schedules/${s.body.id}`, {
      as: admin,
      body: { cron: '*/5 * * * * *', timezone: 'UTC', overlap: 'skip', catchUp: 'all', dagId: 'other', version: 1 },
    });
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({
      cron: '*/5 * * * * *',
      timezone: 'UTC',
      overlap: 'skip',
      catchUp: 'all',
      dagId: 'other',
      version: 1,
    });
    expect(Date.parse(r.body.nextFireAt) - Date.now()).toBeLessThanOrEqual(5_000);
    const unpin = await app.request('PATCH', `/api/v1/schedules/${s.body.id}`, { as: admin, body: { version: null } });
    expect(unpin.body.version).toBeNull();
    const empty = await app.request('PATCH', `/api/v1/schedules/${s.body.id}`, { as: admin, body: {} });
    expect(empty.status).toBe(400);
  });

  it('pauses and resumes a schedule, idempotently', async () => {
    const s = await create(base);
    for (let i = 0; i < 2; i++) {
      const p = await app.request('POST', `/api/v1/schedules/${s.body.id}/pause`, { as: admin });
      expect(p.status).toBe(200);
      expect(p.body.paused).toBe(true);
    }
    const r = await app.request('POST', `/api/v1/schedules/${s.body.id}/resume`, { as: admin });
    expect(r.status).toBe(200);
    expect(r.body.paused).toBe(false);
    expect(r.body.nextFireAt).toBe(s.body.nextFireAt);
  });

  it('deletes a schedule', async () => {
    const s = await create(base);
    expect((await app.request('DELETE', `/api/v1/schedules/${s.body.id}`, { as: admin })).status).toBe(204);
    expect((await app.request('GET', `/api/v1/schedules/${s.body.id}`, { as: reader })).status).toBe(404);
    expect((await app.request('DELETE', `/api/v1/schedules/${s.body.id}`, { as: admin })).status).toBe(404);
  });

  it('lists schedules in pages with a keyset token', async () => {
    const seen = new Set<string>();
    let token: string | null = null;
    let pages = 0;
    do {
      const q: string = token ? `?limit=2&pageToken=${token}` : '?limit=2';
      const r = await app.request('GET', `/api/v1/schedules${q}`, { as: reader });
      expect(r.status).toBe(200);
      for (const item of r.body.items) {
        expect(seen.has(item.id)).toBe(false);
        seen.add(item.id);
      }
      token = r.body.nextPageToken;
      pages++;
    } while (token && pages < 50);
    expect(seen.size).toBe(await count(app.tenantId));
    expect(pages).toBeGreaterThan(1);
    const bad = await app.request('GET', '/api/v1/schedules?pageToken=garbage', { as: reader });
    expect(bad.status).toBe(400);
  });

  it('requires orchestrator:admin to change schedules; read may list, get and preview', async () => {
    const r = await create(base, reader);
    expect(r.status).toBe(403);
    const s = await create(base);
    expect((await app.request('POST', `/api/v1/schedules/${s.body.id}/pause`, { as: reader })).status).toBe(403);
    expect(
      (await app.request('PATCH', `/api/v1/schedules/${s.body.id}`, { as: reader, body: { paused: true } })).status,
    ).toBe(403);
    expect((await app.request('DELETE', `/api/v1/schedules/${s.body.id}`, { as: reader })).status).toBe(403);
    expect((await app.request('GET', `/api/v1/schedules/${s.body.id}/fires`, { as: reader })).status).toBe(200);
  });

  it("tenant B cannot read, change, pause, resume, delete or preview tenant A's schedule, nor schedule A's DAG", async () => {
    const s = await create(base);
    const id = s.body.id as string;
    const calls: [string, string, unknown?][] = [
      ['GET', `/api/v1/schedules/${id}`],
      ['GET', `/api/v1/schedules/${id}/next?count=3`],
      ['GET', `/api/v1/schedules/${id}/fires`],
      ['PATCH', `/api/v1/schedules/${id}`, { paused: true }],
      ['POST', `/api/v1/schedules/${id}/pause`],
      ['POST', `/api/v1/schedules/${id}/resume`],
      ['DELETE', `/api/v1/schedules/${id}`],
    ];
    for (const [method, url, body] of calls) {
      const r = await app.request(method, url, { as: b, body });
      expect([method, url, r.status, r.body?.error?.code]).toEqual([method, url, 404, 'SCHEDULE_NOT_FOUND']);
    }
    const list = await app.request('GET', '/api/v1/schedules', { as: b });
    expect(list.body.items).toEqual([]);
    const onA = await create(base, b);
    expect(onA.status).toBe(404);
    expect(onA.body.error.code).toBe('DAG_NOT_FOUND');
    expect(await count(b.tenantId)).toBe(0);
    expect((await app.request('GET', `/api/v1/schedules/${id}`, { as: reader })).body).toEqual(s.body);
  });
});

describe('schedules fired by a scheduler loop', () => {
  let app: TestApp;
  let loop: SchedulerLoop;
  let as: { token: string; tenantId: string };
  const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

  beforeAll(async () => {
    app = await startTestApp();
    as = { token: app.adminToken, tenantId: app.tenantId };
    await publishDag(app.testDb.db, app.tenantId, 'beat');
    // The scheduler role's loop, on the app's database, with the real clock.
    const db = app.ordo.database;
    const runs = app.ordo.app.get(RunsService, { strict: false });
    loop = new SchedulerLoop(
      db,
      new SchedulesRepository(),
      new RunsScheduleRunner(db, runs, new RunsRepository()),
      new SystemClock(),
    );
    await loop.start();
  });
  afterAll(async () => {
    await loop.stop();
    await app.close();
  });

  const fires = async (id: string) =>
    (await app.request('GET', `/api/v1/schedules/${id}/fires?limit=500`, { as })).body.items.reverse();

  it('fires an every-second schedule into runs, stops while paused and resumes without the paused fire times', async () => {
    const s = await app.request('POST', '/api/v1/schedules', {
      as,
      body: { dagId: 'beat', cron: '* * * * * *', timezone: 'UTC', inputs: { from: 'schedule' } },
    });
    expect(s.status).toBe(201);
    const id = s.body.id as string;
    const deadline = Date.now() + 15_000;
    while ((await fires(id)).length < 3 && Date.now() < deadline) await sleep(200);
    const first = await fires(id);
    expect(first.length).toBeGreaterThanOrEqual(3);
    for (const f of first) {
      expect(f.outcome).toBe('created');
      const run = await app.request('GET', `/api/v1/runs/${f.runId}`, { as });
      expect(run.status).toBe(200);
      expect(run.body).toMatchObject({
        dagId: 'beat',
        runToken: `schedule:${id}:${f.fireTime}`,
        inputs: { from: 'schedule' },
      });
    }

    const paused = await app.request('POST', `/api/v1/schedules/${id}/pause`, { as });
    expect(paused.status).toBe(200);
    const atPause = (await fires(id)).length;
    await sleep(2_500);
    expect(await fires(id)).toHaveLength(atPause);
    const pausedAt = Date.now();

    const resumed = await app.request('POST', `/api/v1/schedules/${id}/resume`, { as });
    expect(Date.parse(resumed.body.nextFireAt)).toBeGreaterThan(pausedAt);
    while ((await fires(id)).length < atPause + 2 && Date.now() < deadline + 10_000) await sleep(200);
    const after = (await fires(id)).slice(atPause);
    expect(after.length).toBeGreaterThanOrEqual(2);
    // catchUp none: nothing from the paused interval.
    for (const f of after) expect(Date.parse(f.fireTime)).toBeGreaterThan(pausedAt);
    await app.request('POST', `/api/v1/schedules/${id}/pause`, { as });
  });
});
