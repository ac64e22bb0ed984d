import net from 'node:net';
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import pino from 'pino';
import { DomainError } from '../../src/core/errors/domain-error';
import { LimitHits } from '../../src/modules/plans/limit-hits';
import { LimitRetention } from '../../src/modules/plans/limit-hits-retention';
import type { PlanLimits } from '../../src/modules/plans/plan-limits';
import { TenantLimits } from '../../src/modules/plans/tenant-limits';
import { RunsService } from '../../src/modules/runs/runs.service';
import { startOrdo, type RunningOrdo } from '../../src/ordo';
import { startTestApp, type TestApp, type TestResponse } from '../support/test-app';
import { chainDag, publishDag } from './runs-support';

const REDIS_URL = process.env.ORDO_TEST_REDIS_URL ?? 'redis://127.0.0.1:6379';

type As = { token: string; tenantId: string };

const stores: { store: 'postgres' | 'redis'; env: Record<string, string> }[] = [
  { store: 'postgres', env: {} },
  { store: 'redis', env: { REDIS_URL, ORDO_RATE_LIMIT_KEY_PREFIX: `test:${randomUUID()}` } },
];

/**
 * Two api replicas on one database, with the limiter's counters in PostgreSQL (the default) and in
 * Redis: the limits hold across the replicas. No durations are asserted: limits are set so that
 * counts decide (a bucket of 5 runs a minute, 1 request a second fired back to back).
 */
describe.each(stores)('rate limits with the counters in $store', ({ store, env }) => {
  let a: TestApp;
  let b: RunningOrdo;
  let system: pg.Client;
  let seq = 0;

  beforeAll(async () => {
    if (store === 'redis') await assertReachable(REDIS_URL);
    a = await startTestApp(env);
    b = await startOrdo(a.config, pino({ level: 'silent' }), {
      appUrl: a.testDb.appUrl,
      systemUrl: a.testDb.systemUrl,
      ownerUrl: a.testDb.ownerUrl,
    });
    system = new pg.Client({ connectionString: a.testDb.systemUrl });
    await system.connect();
  });
  afterAll(async () => {
    await system?.end();
    await b?.close();
    await a?.close();
  });

  const onB = async (method: string, url: string, as: As, body?: unknown): Promise<TestResponse> => {
    const headers: Record<string, string> = { authorization: `Bearer ${as.token}`, 'x-tenant-id': as.tenantId };
    if (body !== undefined) headers['content-type'] = 'application/json';
    const r = await fetch(`${b.url}${url}`, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await r.text();
    return { status: r.status, headers: r.headers, body: text ? JSON.parse(text) : undefined, text };
  };
  const onA = (method: string, url: string, as: As, body?: unknown) => a.request(method, url, { as, body });

  /** Puts a tenant on a plan of its own with `limits`, known to both replicas at once. */
  const setPlan = async (tenantId: string, limits: PlanLimits) => {
    await system.query(`insert into plan (id, limits) values ($1, $2)`, [`plan-${tenantId}`, limits]);
    await system.query(`insert into tenant_plan (tenant_id, plan_id) values ($1, $2)`, [tenantId, `plan-${tenantId}`]);
    for (const app of [a.ordo.app, b.app]) app.get(TenantLimits, { strict: false }).forget(tenantId);
  };
  /** A new tenant (with an admin token) on a plan of its own with `limits`. */
  const tenantWith = async (limits: PlanLimits): Promise<As> => {
    const t = await a.tenant(`rl-${store.slice(0, 2)}-${++seq}`);
    await setPlan(t.tenantId, limits);
    return t;
  };

  const createRun = (on: 'a' | 'b', as: As, runToken: string) =>
    (on === 'a' ? onA : onB)('POST', '/api/v1/runs', as, { dagId: 'rl', inputs: {}, runToken });

  const runCount = (tenantId: string) => runsOf(system, tenantId);

  /**
   * Tries `attempt` until it reports the refusal it looks for: a request fired right after another
   * lands in the same one-second window unless the machine stalls for a second between them, so a
   * few attempts decide; counters kept apart per replica would never refuse.
   */
  const someAttempt = async (attempt: () => Promise<boolean>) => {
    for (let i = 0; i < 5; i++) {
      if (await attempt()) return true;
      // Let the windows of this attempt close before the next one.
      await new Promise((r) => setTimeout(r, 1_100));
    }
    return false;
  };

  it('holds runsPerMinute across the replicas: of 12 creations at once, 5 are created and 7 get 429 with Retry-After', async () => {
    const t = await tenantWith({ runsPerMinute: 5 });
    await publishDag(a, t.tenantId, chainDag('rl', 1));
    const answers = await Promise.all(
      Array.from({ length: 12 }, (_, i) => createRun(i % 2 ? 'b' : 'a', t, `tok-${i}`)),
    );
    const created = answers.filter((r) => r.status === 201);
    const refused = answers.filter((r) => r.status === 429);
    expect({ created: created.length, refused: refused.length }).toEqual({ created: 5, refused: 7 });
    expect(await runCount(t.tenantId)).toBe(5);
    // Each creation answered the bucket it left: the five successes saw 4, 3, 2, 1 and 0 runs left.
    expect(created.map((r) => r.headers.get('ratelimit-remaining')).sort()).toEqual(['0', '1', '2', '3', '4']);
    for (const r of created) {
      expect(r.headers.get('ratelimit-limit')).toBe('5');
      expect(r.headers.get('ratelimit-policy')).toBe('5;w=60');
    }
    for (const r of refused) {
      expect(r.body.error.code).toBe('RATE_LIMITED');
      expect(r.body.error.details).toMatchObject({ limit: 'runsPerMinute', value: 5, windowSeconds: 60 });
      const retryAfter = Number(r.headers.get('retry-after'));
      expect(Number.isInteger(retryAfter) && retryAfter >= 1 && retryAfter <= 60).toBe(true);
      expect(r.headers.get('ratelimit-limit')).toBe('5');
      expect(r.headers.get('ratelimit-remaining')).toBe('0');
      expect(r.headers.get('ratelimit-reset')).toBe(String(retryAfter));
      expect(r.headers.get('ratelimit-policy')).toBe('5;w=60');
    }

    // Every refusal is a limit hit, counted by the replica that answered it.
    await Promise.all([a.ordo.app, b.app].map((app) => app.get(LimitHits, { strict: false }).flush()));
    const hits = await system.query<{ limit_name: string; hits: number }>(
      `select limit_name, sum(hits)::int hits from limit_hit where tenant_id = $1 group by limit_name`,
      [t.tenantId],
    );
    expect(hits.rows).toEqual([{ limit_name: 'runsPerMinute', hits: 7 }]);
  });

  it('lets 100 concurrent creators on two replicas create exactly 50 runs against runsPerMinute 50', async () => {
    const t = await tenantWith({ runsPerMinute: 50 });
    await publishDag(a, t.tenantId, chainDag('rl', 1));
    const answers = await Promise.all(Array.from({ length: 100 }, (_, i) => createRun(i % 2 ? 'b' : 'a', t, `c-${i}`)));
    const statuses = answers.map((r) => r.status);
    expect({ 201: statuses.filter((x) => x === 201).length, 429: statuses.filter((x) => x === 429).length }).toEqual({
      201: 50,
      429: 50,
    });
    expect(await runCount(t.tenantId)).toBe(50);
  });

  it('counts only runs created: a repeated run token gives its point back, a replay takes one', async () => {
    const t = await tenantWith({ runsPerMinute: 3 });
    await publishDag(a, t.tenantId, chainDag('rl', 1));
    const first = await createRun('a', t, 'x');
    expect(first.status).toBe(201);
    for (const on of ['a', 'b', 'a'] as const) {
      const repeat = await createRun(on, t, 'x');
      expect(repeat.status).toBe(200);
      expect(repeat.headers.get('ratelimit-remaining')).toBe('2');
    }
    expect((await createRun('b', t, 'y')).status).toBe(201);
    expect((await onB('POST', `/api/v1/runs/${first.body.runId}/replay`, t)).status).toBe(201);
    const over = await onA('POST', `/api/v1/runs/${first.body.runId}/replay`, t);
    expect(over.status).toBe(429);
    expect(over.body.error.code).toBe('RATE_LIMITED');
    expect((await createRun('a', t, 'z')).status).toBe(429);
    expect(await runCount(t.tenantId)).toBe(3);
  });

  it('lets a batch up to runsBurst through at once and refuses a larger one whole, writing nothing', async () => {
    const t = await tenantWith({ runsPerMinute: 2, runsBurst: 6 });
    await publishDag(a, t.tenantId, chainDag('rl', 1));
    const runs = a.ordo.app.get(RunsService, { strict: false });
    const batch = (n: number, p: string) =>
      Array.from({ length: n }, (_, i) => ({ dagId: 'rl', inputs: {}, runToken: `${p}-${i}`, requestedBy: 'test' }));
    await expect(runs.createRuns(t.tenantId, batch(7, 'big'))).rejects.toMatchObject({
      code: 'RATE_LIMITED',
      status: 429,
      details: { limit: 'runsPerMinute', value: 6 },
    });
    expect(await runCount(t.tenantId)).toBe(0);
    const made = await runs.createRuns(t.tenantId, batch(6, 'fit'));
    expect(made.filter((r) => r.created)).toHaveLength(6);
    const next = await createRun('b', t, 'one-more');
    expect(next.status).toBe(429);
    // The bucket of 6 refills every 3 minutes: 2 runs a minute on average.
    expect(next.headers.get('ratelimit-policy')).toBe('6;w=180');
    expect(await runCount(t.tenantId)).toBe(6);
  });

  it('limits requests per token on both replicas, each token on its own, with the RateLimit fields on every answer', async () => {
    const t = await tenantWith({ requestsPerSecondPerToken: 1 });
    const checked = await someAttempt(async () => {
      const x = { token: await a.token(t.tenantId, ['orchestrator:read']), tenantId: t.tenantId };
      const y = { token: await a.token(t.tenantId, ['orchestrator:read']), tenantId: t.tenantId };
      const ok = await onA('GET', '/api/v1/runs', x);
      const again = await onB('GET', '/api/v1/runs', x);
      const other = await onB('GET', '/api/v1/runs', y);
      if (again.status === 200) return false;
      expect(ok.status).toBe(200);
      expect(ok.headers.get('ratelimit-limit')).toBe('1');
      expect(ok.headers.get('ratelimit-remaining')).toBe('0');
      expect(ok.headers.get('ratelimit-reset')).toBe('1');
      expect(ok.headers.get('ratelimit-policy')).toBe('1;w=1');
      expect(again.status).toBe(429);
      expect(again.body.error).toMatchObject({ code: 'RATE_LIMITED', details: { limit: 'requestsPerSecondPerToken' } });
      expect(again.headers.get('retry-after')).toBe('1');
      expect(again.headers.get('ratelimit-remaining')).toBe('0');
      expect(other.status).toBe(200);
      return true;
    });
    expect(checked).toBe(true);
  });

  it('limits requests per tenant across its tokens, worker tokens included', async () => {
    const t = await a.tenant(`rl-${store.slice(0, 2)}-${++seq}`);
    const worker = await onA('POST', '/api/v1/tokens', t, { scopes: ['worker'], pool: 'p', subject: 'w' });
    expect(worker.status).toBe(201);
    await setPlan(t.tenantId, { requestsPerSecondPerTenant: 1, requestsPerSecondPerToken: 50 });
    const w = { token: worker.body.token as string, tenantId: t.tenantId };
    const x = { token: await a.token(t.tenantId, ['orchestrator:read']), tenantId: t.tenantId };
    const checked = await someAttempt(async () => {
      const ok = await onA('GET', '/api/v1/runs', x);
      const heartbeat = await onB('POST', `/api/v1/workers/${randomUUID()}/heartbeat`, w, {});
      if (ok.status !== 200 || heartbeat.status !== 429) return false;
      // The tenant's limit is the one closest to refusing; both are listed.
      expect(ok.headers.get('ratelimit-limit')).toBe('1');
      expect(ok.headers.get('ratelimit-policy')).toBe('1;w=1, 50;w=1');
      expect(heartbeat.body.error).toMatchObject({
        code: 'RATE_LIMITED',
        details: { limit: 'requestsPerSecondPerTenant' },
      });
      return true;
    });
    expect(checked).toBe(true);
    const back = await someAttempt(async () => {
      const first = await onB('POST', `/api/v1/workers/${randomUUID()}/heartbeat`, w, {});
      const then = await onA('GET', '/api/v1/runs', x);
      // The worker's request counted (it reached its route: an unknown worker is 404).
      if (first.status !== 404 || then.status !== 429) return false;
      expect(first.headers.get('ratelimit-remaining')).toBe('0');
      return true;
    });
    expect(back).toBe(true);
  });

  it('does not limit a tenant whose plan sets no rate, nor a tenant without a plan', async () => {
    const planned = await tenantWith({ monthlyRuns: 1000 });
    const unplanned = { token: a.adminToken, tenantId: a.tenantId };
    for (const as of [planned, unplanned]) {
      const answers = await Promise.all(
        Array.from({ length: 20 }, (_, i) => (i % 2 ? onB : onA)('GET', '/api/v1/runs', as)),
      );
      expect(answers.map((r) => r.status)).toEqual(Array(20).fill(200));
      expect(answers.filter((r) => r.headers.has('ratelimit-limit'))).toHaveLength(0);
    }
    if (store === 'postgres') {
      const rows = await system.query(`select key from rate_limit where key like any($1)`, [
        [`%${planned.tenantId}%`, `%:${a.tenantId}`],
      ]);
      expect(rows.rows).toEqual([]);
    }
  });

  if (store === 'postgres') {
    it('counts each QUOTA_EXCEEDED and RATE_LIMITED refusal once by the limit it names, and nothing else', async () => {
      const t = await tenantWith({});
      const hits = a.ordo.app.get(LimitHits, { strict: false });
      const quota = new DomainError('QUOTA_EXCEEDED', 'over', 429, { limit: 'monthlyRuns', value: 1, current: 1 });
      hits.recordError(t.tenantId, quota);
      hits.recordError(t.tenantId, quota);
      hits.recordError(t.tenantId, new DomainError('QUOTA_EXCEEDED', 'over', 429, { limit: 'maxQueuedSteps' }));
      hits.recordError(t.tenantId, new DomainError('RUN_NOT_FOUND', 'run not found', 404));
      hits.recordError(t.tenantId, new Error('boom'));
      await hits.flush();
      const rows = await system.query<{ limit_name: string; hits: number }>(
        `select limit_name, hits::int from limit_hit where tenant_id = $1 order by limit_name`,
        [t.tenantId],
      );
      expect(rows.rows).toEqual([
        { limit_name: 'maxQueuedSteps', hits: 1 },
        { limit_name: 'monthlyRuns', hits: 1 },
      ]);
      expect(hits.totals().filter((x) => x.tenantId === t.tenantId)).toHaveLength(2);
    });

    it('deletes limit hits older than a day and closed limiter windows in the retention sweep, keeping the rest', async () => {
      const t = await tenantWith({});
      await system.query(
        `insert into limit_hit (tenant_id, limit_name, minute, hits) values
           ($1, 'runsPerMinute', date_trunc('minute', now() - interval '25 hours'), 3),
           ($1, 'runsPerMinute', date_trunc('minute', now() - interval '1 hour'), 2)`,
        [t.tenantId],
      );
      const now = Date.now();
      await system.query(`insert into rate_limit (key, points, expire) values ($1, 1, $2), ($3, 1, $4)`, [
        `old-${t.tenantId}`,
        now - 3_600_000,
        `open-${t.tenantId}`,
        now + 3_600_000,
      ]);
      await a.ordo.app.get(LimitRetention, { strict: false }).sweep();
      const hits = await system.query<{ hits: number }>(`select hits::int from limit_hit where tenant_id = $1`, [
        t.tenantId,
      ]);
      expect(hits.rows).toEqual([{ hits: 2 }]);
      const keys = await system.query<{ key: string }>(`select key from rate_limit where key like $1`, [
        `%-${t.tenantId}`,
      ]);
      expect(keys.rows).toEqual([{ key: `open-${t.tenantId}` }]);
    });
  }
});

/**
 * Redis behind a TCP relay the test can cut: while Redis is out of reach, limited requests and
 * creations fail closed (503) and unlimited tenants are served; once it is back, limits apply again.
 */
describe('rate limits while the Redis store is out', () => {
  let app: TestApp;
  let system: pg.Client;
  let relay: Relay;

  beforeAll(async () => {
    await assertReachable(REDIS_URL);
    relay = await startRelay(new URL(REDIS_URL));
    app = await startTestApp({ REDIS_URL: relay.url, ORDO_RATE_LIMIT_KEY_PREFIX: `test:${randomUUID()}` });
    system = new pg.Client({ connectionString: app.testDb.systemUrl });
    await system.connect();
  });
  afterAll(async () => {
    await system?.end();
    await app?.close();
    await relay?.close();
  });

  it('refuses limited requests and creations with 503 RATE_LIMITER_UNAVAILABLE, writing nothing, serves unlimited tenants, and limits again once Redis is back', async () => {
    const t = await app.tenant('out-limited');
    await system.query(`insert into plan (id, limits) values ('out', $1)`, [
      { runsPerMinute: 100, requestsPerSecondPerTenant: 100 },
    ]);
    await system.query(`insert into tenant_plan (tenant_id, plan_id) values ($1, 'out')`, [t.tenantId]);
    await publishDag(app, t.tenantId, chainDag('rl', 1));
    const free = { token: app.adminToken, tenantId: app.tenantId };
    expect((await app.request('GET', '/api/v1/runs', { as: t })).status).toBe(200);

    await relay.cut();
    const get = await app.request('GET', '/api/v1/runs', { as: t });
    expect(get.status).toBe(503);
    expect(get.body.error.code).toBe('RATE_LIMITER_UNAVAILABLE');
    expect(Number(get.headers.get('retry-after'))).toBeGreaterThan(0);
    expect((await app.request('GET', '/api/v1/runs', { as: free })).status).toBe(200);

    // Without the request limit, creation still goes through the run bucket, and fails closed.
    await system.query(`update plan set limits = $1 where id = 'out'`, [{ runsPerMinute: 100 }]);
    app.ordo.app.get(TenantLimits, { strict: false }).forget(t.tenantId);
    const body = { dagId: 'rl', inputs: {}, runToken: 'r1' };
    const create = await app.request('POST', '/api/v1/runs', { as: t, body });
    expect(create.status).toBe(503);
    expect(create.body.error.code).toBe('RATE_LIMITER_UNAVAILABLE');
    expect(await runsOf(system, t.tenantId)).toBe(0);

    await relay.restore();
    let again: TestResponse | undefined;
    for (let i = 0; i < 100 && again?.status !== 201; i++) {
      if (i > 0) await new Promise((r) => setTimeout(r, 100));
      again = await app.request('POST', '/api/v1/runs', { as: t, body });
    }
    expect(again?.status).toBe(201);
    expect(again?.headers.get('ratelimit-limit')).toBe('100');
    expect(await runsOf(system, t.tenantId)).toBe(1);
  });
});

const runsOf = async (c: pg.Client, tenantId: string) =>
  (await c.query<{ n: number }>(`select count(*)::int n from run where tenant_id = $1`, [tenantId])).rows[0].n;

interface Relay {
  url: string;
  /** Closes every relayed connection and refuses new ones. */
  cut(): Promise<void>;
  /** Accepts connections again on the same port. */
  restore(): Promise<void>;
  close(): Promise<void>;
}

/** A TCP relay on a loopback port to `target`'s Redis. */
async function startRelay(target: URL): Promise<Relay> {
  const sockets = new Set<net.Socket>();
  const server = net.createServer((c) => {
    const up = net.connect(Number(target.port || 6379), target.hostname);
    for (const s of [c, up]) {
      sockets.add(s);
      s.on('close', () => sockets.delete(s));
      s.on('error', () => s.destroy());
    }
    c.pipe(up).pipe(c);
  });
  const listen = (port: number) =>
    new Promise<number>((resolve) =>
      server.listen(port, '127.0.0.1', () => resolve((server.address() as net.AddressInfo).port)),
    );
  const stop = () =>
    new Promise<void>((resolve) => {
      server.close(() => resolve());
      for (const s of sockets) s.destroy();
    });
  const port = await listen(0);
  return {
    url: `redis://127.0.0.1:${port}`,
    cut: stop,
    restore: async () => void (await listen(port)),
    close: async () => {
      if (server.listening) await stop();
    },
  };
}

async function assertReachable(url: string): Promise<void> {
  const u = new URL(url);
  await new Promise<void>((resolve, reject) => {
    const s = net.connect(Number(u.port || 6379), u.hostname);
    s.once('connect', () => {
      s.destroy();
      resolve();
    });
    s.once('error', () => reject(new Error(`Redis at ${url} is not reachable (ORDO_TEST_REDIS_URL)`)));
  });
}
