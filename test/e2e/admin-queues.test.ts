import { sql } from 'kysely';
import { ArtifactsRepository } from '../../src/modules/artifacts/artifacts.repository';
import { EngineRepository } from '../../src/modules/engine/engine.repository';
import { EngineStore, completionFor } from '../../src/modules/engine/engine.store';
import { startTestApp, type TestApp } from '../support/test-app';
import { publishDag } from './runs-support';

interface TenantQueue {
  tenantId: string;
  plan: { id: string; limits: Record<string, number | null> } | null;
  steps: { ready: number; waiting: number; inFlight: number };
  inFlightCap: number;
  sharedInFlightCap: number | null;
  oldestReadySeconds: number | null;
  claimsPerSecond: number;
  limitHits: { limit: string; hits: number }[];
}

/**
 * GET /api/v1/admin/queues against a state built through the real engine: runs created through the
 * API (ready items), steps claimed by the engine store (leases, attempts), an approval step handed
 * back as waiting, a plan assigned with its engine share synced, and limit hits as the api
 * processes record them. No worker runs in this process, so nothing moves between readings.
 */
describe('GET /api/v1/admin/queues', () => {
  let app: TestApp;
  let store: EngineStore;
  const A = 'queues-alpha';
  const B = 'queues-beta';
  let asA: { token: string; tenantId: string };
  const opts = { workerId: 'admin-test', capacity: 1, leaseMs: 600_000, tenantCap: 64 };

  const queues = async (query = '') => {
    const r = await app.request('GET', `/api/v1/admin/queues${query}`, { as: { token: app.platformToken } });
    expect({ status: r.status, text: r.status === 200 ? '' : r.text }).toEqual({ status: 200, text: '' });
    return r.body as { at: string; claimsWindowSeconds: number; limitHitsSince: string; items: TenantQueue[] };
  };
  const itemOf = (body: { items: TenantQueue[] }, id: string) => {
    const item = body.items.find((i) => i.tenantId === id);
    if (!item) throw new Error(`${id} is not in the page`);
    return item;
  };

  beforeAll(async () => {
    app = await startTestApp({ ORDO_ROLES: 'api', ORDO_TENANT_MAX_IN_FLIGHT: '40', ORDO_TENANT_SHARED_IN_FLIGHT: '2' });
    asA = await app.tenant(A);
    await app.tenant(B);
    store = new EngineStore(app.ordo.database, new EngineRepository(), new ArtifactsRepository());
    await publishDag(app, A, { id: 'review', steps: [{ id: 'ask', plugin: 'approval', with: { message: 'ok?' } }] });
    await publishDag(app, A, {
      id: 'fan',
      steps: ['a', 'b', 'c', 'd'].map((id) => ({ id, plugin: 'noop' })),
    });
    const create = async (dagId: string, runToken: string) => {
      const r = await app.request('POST', '/api/v1/runs', { as: asA, body: { dagId, inputs: {}, runToken } });
      expect(r.status).toBe(201);
    };
    // The approval step is queued first, so the first claim takes it.
    await create('review', 'r1');
    await create('fan', 'f1');
    await create('fan', 'f2');
    const [ask] = await store.claimNow({ ...opts, onlyTenants: [A] });
    expect(ask.stepId).toBe('ask');
    await store.advance(
      [completionFor(ask, opts.workerId, { status: 'waiting', wait: { kind: 'approval' }, logs: [] })],
      { ...opts, capacity: 0 },
    );
    const leased = await store.claimNow({ ...opts, capacity: 2, onlyTenants: [A] });
    expect(leased).toHaveLength(2);

    // A plan with an override of its in-flight cap, synced into the engine's queue row.
    const sys = app.ordo.database.system;
    await sys.transaction().execute(async (tx) => {
      await tx
        .insertInto('plan')
        .values({ id: 'gold', limits: JSON.stringify({ maxStepsInFlight: 10, weight: 3, runsPerMinute: 100 }) })
        .execute();
      await tx
        .insertInto('tenant_plan')
        .values({
          tenant_id: A,
          plan_id: 'gold',
          overrides: JSON.stringify({ maxStepsInFlight: 5, runsPerMinute: null }),
        })
        .execute();
      await sql`select ordo_plan_sync(${[A]}::text[])`.execute(tx);
    });
    // Limit hits as the api processes write them: this minute, the one before, and an old one.
    await sql`
      insert into limit_hit (tenant_id, limit_name, minute, hits) values
        (${A}, 'runsPerMinute', date_trunc('minute', now()), 3),
        (${A}, 'requestsPerSecondPerTenant', date_trunc('minute', now()) - interval '1 minute', 2),
        (${A}, 'runsPerMinute', date_trunc('minute', now()) - interval '10 minutes', 50),
        (${B}, 'maxQueuedSteps', date_trunc('minute', now()) - interval '30 minutes', 7)
    `.execute(sys);
  });
  afterAll(async () => app?.close());

  it('reports ready, waiting and in-flight steps, the oldest ready age, claims, plan and recent limit hits', async () => {
    const body = await queues();
    expect(body.claimsWindowSeconds).toBe(60);
    const a = itemOf(body, A);
    expect(a.steps).toEqual({ ready: 6, waiting: 1, inFlight: 2 });
    expect(a.plan).toEqual({ id: 'gold', limits: { maxStepsInFlight: 5, weight: 3, runsPerMinute: null } });
    // The plan's cap; while tenants share, the shared cap times the weight (2 × 3), at most that.
    expect(a.inFlightCap).toBe(5);
    expect(a.sharedInFlightCap).toBe(5);
    // Three attempts began in the window: the approval step's and the two leased steps'.
    expect(a.claimsPerSecond).toBeCloseTo(3 / 60, 10);
    expect(a.limitHits).toEqual([
      { limit: 'runsPerMinute', hits: 3 },
      { limit: 'requestsPerSecondPerTenant', hits: 2 },
    ]);
    // The oldest ready item is the first in queue order; its age is read on the database's clock.
    const first = await app.ordo.database.system
      .selectFrom('queue_item')
      .select(['enqueued_at', 'step_id'])
      .where('tenant_id', '=', A)
      .where('state', '=', 'ready')
      .orderBy('id')
      .limit(1)
      .executeTakeFirstOrThrow();
    expect(a.oldestReadySeconds).toBeCloseTo((Date.parse(body.at) - first.enqueued_at.getTime()) / 1000, 2);
    expect(a.oldestReadySeconds).toBeGreaterThan(0);

    const b = itemOf(body, B);
    expect(b).toEqual({
      tenantId: B,
      plan: null,
      steps: { ready: 0, waiting: 0, inFlight: 0 },
      inFlightCap: 40,
      sharedInFlightCap: 2,
      oldestReadySeconds: null,
      claimsPerSecond: 0,
      limitHits: [],
    });
    const since = new Date(body.at);
    since.setUTCSeconds(0, 0);
    expect(body.limitHitsSince).toBe(new Date(since.getTime() - 60_000).toISOString());
  });

  it('moves with the queue: a step claimed leaves ready and joins in flight', async () => {
    await store.claimNow({ ...opts, onlyTenants: [A] });
    const a = itemOf(await queues(`?tenantId=${A}`), A);
    expect(a.steps).toEqual({ ready: 5, waiting: 1, inFlight: 3 });
    expect(a.claimsPerSecond).toBeCloseTo(4 / 60, 10);
  });

  it('pages tenants by id, and filters one', async () => {
    const ids: string[] = [];
    let token: string | null = null;
    do {
      const q: string = `?limit=1${token ? `&pageToken=${token}` : ''}`;
      const r = await app.request('GET', `/api/v1/admin/queues${q}`, { as: { token: app.platformToken } });
      expect(r.status).toBe(200);
      expect((r.body.items as TenantQueue[]).length).toBeLessThanOrEqual(1);
      ids.push(...(r.body.items as TenantQueue[]).map((i) => i.tenantId));
      token = r.body.nextPageToken as string | null;
    } while (token);
    expect(ids).toEqual([...ids].sort());
    expect(ids).toEqual(expect.arrayContaining([A, B, app.tenantId]));
    const one = await queues(`?tenantId=${B}`);
    expect(one.items.map((i) => i.tenantId)).toEqual([B]);
  });

  it('refuses no token (401), tenant tokens (403), even with their own tenant header, and bad input (400, 404)', async () => {
    expect((await app.request('GET', '/api/v1/admin/queues')).status).toBe(401);
    const tenant = await app.request('GET', '/api/v1/admin/queues', { as: asA });
    expect(tenant.status).toBe(403);
    expect(tenant.body.error.code).toBe('INSUFFICIENT_SCOPE');
    const other = await app.request('GET', `/api/v1/admin/queues?tenantId=${B}`, { as: asA });
    expect(other.status).toBe(403);
    expect(other.text).not.toContain('maxQueuedSteps');
    const as = { token: app.platformToken };
    expect((await app.request('GET', '/api/v1/admin/queues?limit=0', { as })).status).toBe(400);
    expect((await app.request('GET', '/api/v1/admin/queues?limit=201', { as })).status).toBe(400);
    expect((await app.request('GET', '/api/v1/admin/queues?pageToken=nope', { as })).body.error.code).toBe(
      'INVALID_PAGE_TOKEN',
    );
    const unknown = await app.request('GET', '/api/v1/admin/queues?tenantId=no-such-tenant', { as });
    expect(unknown.status).toBe(404);
    expect(unknown.body.error.code).toBe('NOT_FOUND');
  });
});
