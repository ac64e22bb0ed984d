import { verifyChain, type ChainedEvent } from '../../src/modules/runs/run-events';
import { RunsService } from '../../src/modules/runs/runs.service';
import { startTestApp, type TestApp } from '../support/test-app';
import { chainDag, disableVersion, publishDag } from './runs-support';

/**
 * Concurrent run creations of one tenant are written together in one transaction (group commit).
 * Each request keeps the answer and the error it would get on its own, and a refused request
 * writes nothing while the others of its group are written.
 */
describe('runs created together', () => {
  let app: TestApp;
  let as: { token: string; tenantId: string };
  let other: { token: string; tenantId: string };
  let runs: RunsService;
  let disabledVersion: number;

  beforeAll(async () => {
    app = await startTestApp();
    as = { token: app.adminToken, tenantId: app.tenantId };
    other = await app.tenant('group-b');
    runs = app.ordo.app.get(RunsService, { strict: false });
    for (const t of [app.tenantId, other.tenantId]) {
      await publishDag(app, t, {
        id: 'typed',
        inputs: {
          type: 'object',
          properties: { n: { type: 'integer' } },
          required: ['n'],
          additionalProperties: false,
        },
        steps: [{ id: 'a', plugin: 'noop' }],
      });
      await publishDag(app, t, chainDag('chain3', 3));
    }
    disabledVersion = await publishDag(app, app.tenantId, chainDag('gone', 1));
    await disableVersion(app, app.tenantId, 'gone', disabledVersion);
    await publishDag(app, app.tenantId, {
      ...chainDag('limited-skip', 1),
      constraints: { maxConcurrentRuns: { limit: 2, action: 'skip' } },
    });
    await publishDag(app, app.tenantId, {
      ...chainDag('limited-queue', 1),
      constraints: { maxConcurrentRuns: { limit: 2, action: 'queue' } },
    });
  });
  afterAll(async () => app.close());

  const create = (body: unknown, who = as, headers: Record<string, string> = {}) =>
    app.request('POST', '/api/v1/runs', { as: who, body, headers });
  const countRuns = async (who = as) =>
    (await app.request('GET', '/api/v1/runs?limit=500', { as: who })).body.items.length as number;
  const events = async (runId: string, who = as) =>
    (
      (await app.request('GET', `/api/v1/runs/${runId}/events?limit=1000`, { as: who })).body.items as {
        createdUtc: string;
        type: string;
      }[]
    ).map((e) => ({ ...e, runId, createdAt: e.createdUtc, tenantId: who.tenantId })) as unknown as ChainedEvent[];

  it('answers each of many simultaneous requests as it would answer it alone, writing only the accepted ones', async () => {
    const before = await countRuns();
    const ok = Array.from({ length: 12 }, (_, i) => ({ dagId: 'chain3', inputs: { i }, runToken: `mix-ok-${i}` }));
    const bodies: { body: unknown; status: number; code?: string }[] = [
      ...ok.map((body) => ({ body, status: 201 })),
      {
        body: { dagId: 'typed', inputs: { n: 'one' }, runToken: 'mix-bad-inputs' },
        status: 400,
        code: 'INVALID_INPUTS',
      },
      { body: { dagId: 'nope', inputs: {}, runToken: 'mix-no-dag' }, status: 404, code: 'DAG_NOT_FOUND' },
      {
        body: { dagId: 'typed', version: 99, inputs: { n: 1 }, runToken: 'mix-no-version' },
        status: 404,
        code: 'DAG_NOT_FOUND',
      },
      {
        body: { dagId: 'gone', version: disabledVersion, inputs: {}, runToken: 'mix-disabled' },
        status: 409,
        code: 'DAG_VERSION_DISABLED',
      },
      { body: { dagId: 'typed', inputs: { n: 5 }, runToken: 'mix-typed' }, status: 201 },
    ];
    const rs = await Promise.all(bodies.map((b) => create(b.body)));
    rs.forEach((r, i) => {
      expect({ i, status: r.status, code: r.body?.error?.code }).toEqual({
        i,
        status: bodies[i].status,
        code: bodies[i].code,
      });
    });
    expect(await countRuns()).toBe(before + ok.length + 1);
    for (const r of rs.filter((x) => x.status === 201)) {
      const evs = await events(r.body.runId as string);
      expect(evs[0].type).toBe('run.created');
      expect(verifyChain(evs)).toEqual({ ok: true });
    }
  });

  it('creates one run for a token repeated within one group, answers the repeats 200, and a repeat with other inputs 409', async () => {
    const base = { requestedBy: 'test', dagId: 'typed' };
    // Submitted in the same event-loop turn: one group.
    const settled = await Promise.allSettled([
      runs.createRun(as.tenantId, { ...base, inputs: { n: 1 }, runToken: 'group-dup' }),
      runs.createRun(as.tenantId, { ...base, inputs: { n: 1 }, runToken: 'group-dup' }),
      runs.createRun(as.tenantId, { ...base, inputs: { n: 2 }, runToken: 'group-dup' }),
      runs.createRun(as.tenantId, { ...base, inputs: { n: 3 }, runToken: 'group-other' }),
      runs.createRun(as.tenantId, { ...base, inputs: { n: 'x' }, runToken: 'group-bad' }),
    ]);
    const [first, repeat, clash, another, bad] = settled;
    expect(first).toMatchObject({ status: 'fulfilled', value: { created: true, status: 'queued' } });
    expect(repeat).toMatchObject({ status: 'fulfilled', value: { created: false, status: 'queued' } });
    const firstId = (first as PromiseFulfilledResult<{ runId: string }>).value.runId;
    expect((repeat as PromiseFulfilledResult<{ runId: string }>).value.runId).toBe(firstId);
    expect(clash).toMatchObject({ status: 'rejected', reason: { code: 'RUN_TOKEN_CONFLICT', status: 409 } });
    expect(another).toMatchObject({ status: 'fulfilled', value: { created: true } });
    expect(bad).toMatchObject({ status: 'rejected', reason: { code: 'INVALID_INPUTS', status: 400 } });
    const again = await create({ dagId: 'typed', inputs: { n: 1 }, runToken: 'group-dup' });
    expect(again.status).toBe(200);
    expect(again.body.runId).toBe(firstId);
    const conflicting = await create({ dagId: 'typed', inputs: { n: 9 }, runToken: 'group-other' });
    expect(conflicting.status).toBe(409);
  });

  it('creates exactly one run when many requests race with one token and inputs', async () => {
    const body = { dagId: 'chain3', inputs: { x: 1 }, runToken: 'group-race' };
    const rs = await Promise.all(Array.from({ length: 20 }, () => create(body)));
    expect(rs.filter((r) => r.status === 201)).toHaveLength(1);
    expect(rs.filter((r) => r.status === 200)).toHaveLength(19);
    expect(new Set(rs.map((r) => r.body.runId as string)).size).toBe(1);
  });

  it('keeps the tenants of simultaneous requests apart', async () => {
    const rs = await Promise.all(
      Array.from({ length: 16 }, (_, i) =>
        create({ dagId: 'typed', inputs: { n: i }, runToken: `tenants-${i}` }, i % 2 === 0 ? as : other),
      ),
    );
    expect(rs.map((r) => r.status)).toEqual(Array.from({ length: 16 }, () => 201));
    for (let i = 0; i < rs.length; i++) {
      const mine = i % 2 === 0 ? as : other;
      const theirs = i % 2 === 0 ? other : as;
      const runId = rs[i].body.runId as string;
      expect((await app.request('GET', `/api/v1/runs/${runId}`, { as: mine })).status).toBe(200);
      expect((await app.request('GET', `/api/v1/runs/${runId}`, { as: theirs })).status).toBe(404);
    }
  });

  it('admits at most maxConcurrentRuns of simultaneous requests (skip: the others end cancelled)', async () => {
    const rs = await Promise.all(
      Array.from({ length: 6 }, (_, i) => create({ dagId: 'limited-skip', inputs: { i }, runToken: `skip-${i}` })),
    );
    expect(rs.map((r) => r.status)).toEqual(Array.from({ length: 6 }, () => 201));
    const statuses = rs.map((r) => r.body.status as string).sort();
    expect(statuses).toEqual(['cancelled', 'cancelled', 'cancelled', 'cancelled', 'queued', 'queued']);
  });

  it('admits at most maxConcurrentRuns of simultaneous requests (queue: the others wait)', async () => {
    const rs = await Promise.all(
      Array.from({ length: 5 }, (_, i) => create({ dagId: 'limited-queue', inputs: { i }, runToken: `queue-${i}` })),
    );
    expect(rs.map((r) => r.status)).toEqual(Array.from({ length: 5 }, () => 201));
    const waiting: string[] = [];
    for (const r of rs) {
      const types = (await events(r.body.runId as string)).map((e) => e.type);
      if (types.includes('run.waiting')) waiting.push(r.body.runId as string);
      else expect(types).toContain('step.queued');
    }
    expect(waiting).toHaveLength(3);
  });

  it('keeps Idempotency-Key semantics for simultaneous requests', async () => {
    const keyed = Array.from({ length: 6 }, (_, i) => ({
      body: { dagId: 'typed', inputs: { n: i }, runToken: `idem-${i}` },
      key: `group-key-${i}`,
    }));
    const first = await Promise.all(keyed.map((k) => create(k.body, as, { 'idempotency-key': k.key })));
    expect(first.map((r) => r.status)).toEqual(Array.from({ length: 6 }, () => 201));
    const replay = await Promise.all(keyed.map((k) => create(k.body, as, { 'idempotency-key': k.key })));
    replay.forEach((r, i) => {
      expect(r.status).toBe(201);
      expect(r.headers.get('idempotent-replayed')).toBe('true');
      expect(r.body.runId).toBe(first[i].body.runId);
    });
    const reused = await create({ dagId: 'typed', inputs: { n: 99 }, runToken: 'idem-0' }, as, {
      'idempotency-key': 'group-key-0',
    });
    expect(reused.status).toBe(422);
  });
});
