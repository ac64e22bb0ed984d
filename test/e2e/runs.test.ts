import { verifyChain, type ChainedEvent } from '../../src/modules/runs/run-events';
import { startTestApp, type TestApp } from '../support/test-app';
import { chainDag, disableVersion, publishDag } from './runs-support';

describe('runs API', () => {
  let app: TestApp;
  let as: { token: string; tenantId: string };
  beforeAll(async () => {
    // api only: runs stay queued, nothing executes them.
    app = await startTestApp();
    as = { token: app.adminToken, tenantId: app.tenantId };
    await publishDag(app, app.tenantId, {
      id: 'typed',
      inputs: { type: 'object', properties: { n: { type: 'integer' } }, required: ['n'], additionalProperties: false },
      steps: [{ id: 'a', plugin: 'noop' }],
    });
    await publishDag(app, app.tenantId, chainDag('chain3', 3));
  });
  afterAll(async () => app.close());

  const create = (body: unknown, who = as) => app.request('POST', '/api/v1/runs', { as: who, body });

  it('creates a run with 201, then returns the same run with 200 for the same call', async () => {
    const body = { dagId: 'typed', inputs: { n: 1 }, runToken: 'tok-1' };
    const a = await create(body);
    expect(a.status).toBe(201);
    expect(a.body).toMatchObject({ created: true, status: 'queued' });
    expect(a.body.traceId).toMatch(/^[0-9a-f]{32}$/);
    const b = await create({ runToken: 'tok-1', inputs: { n: 1 }, dagId: 'typed' });
    expect(b.status).toBe(200);
    expect(b.body).toMatchObject({ runId: a.body.runId, created: false, traceId: a.body.traceId });
  });

  it('returns 409 RUN_TOKEN_CONFLICT when the run token is reused with other inputs', async () => {
    expect((await create({ dagId: 'typed', inputs: { n: 1 }, runToken: 'tok-2' })).status).toBe(201);
    const r = await create({ dagId: 'typed', inputs: { n: 2 }, runToken: 'tok-2' });
    expect(r.status).toBe(409);
    expect(r.body.error.code).toBe('RUN_TOKEN_CONFLICT');
  });

  it('creates exactly one run when the same request races', async () => {
    const body = { dagId: 'typed', inputs: { n: 7 }, runToken: 'race' };
    const rs = await Promise.all(Array.from({ length: 8 }, () => create(body)));
    expect(rs.filter((r) => r.status === 201)).toHaveLength(1);
    expect(rs.filter((r) => r.status === 200)).toHaveLength(7);
    expect(new Set(rs.map((r) => r.body.runId as string)).size).toBe(1);
  });

  it('stores inputsHash as the SHA-256 of the canonical inputs', async () => {
    const a = await create({ dagId: 'chain3', inputs: { b: [1, 2], a: 'x' }, runToken: 'hash' });
    const r = await app.request('GET', `/api/v1/runs/${a.body.runId}`, { as });
    // sha256('{"a":"x","b":[1,2]}')
    const { createHash } = await import('node:crypto');
    expect(r.body.inputsHash).toBe(createHash('sha256').update('{"a":"x","b":[1,2]}').digest('hex'));
    expect(r.body.steps.map((s: { stepId: string; status: string }) => [s.stepId, s.status])).toEqual([
      ['s01', 'queued'],
      ['s02', 'pending'],
      ['s03', 'pending'],
    ]);
  });

  it.each([
    [{ dagId: 'typed', inputs: { n: 'one' }, runToken: 't' }, 400, 'INVALID_INPUTS'],
    [{ dagId: 'typed', inputs: {}, runToken: 't' }, 400, 'INVALID_INPUTS'],
    [{ dagId: 'typed', inputs: { n: 1, extra: true }, runToken: 't' }, 400, 'INVALID_INPUTS'],
    [{ dagId: 'typed', inputs: { n: 1 }, runToken: '' }, 400, 'VALIDATION_FAILED'],
    [{ dagId: 'typed', inputs: { n: 1 }, runToken: 't', unknown: 1 }, 400, 'VALIDATION_FAILED'],
    [{ dagId: 'nope', inputs: {}, runToken: 't' }, 404, 'DAG_NOT_FOUND'],
    [{ dagId: 'typed', version: 99, inputs: { n: 1 }, runToken: 't' }, 404, 'DAG_NOT_FOUND'],
  ])('rejects bad input %j with %i %s and writes nothing', async (body, status, code) => {
    const before = await app.request('GET', '/api/v1/runs?limit=500', { as });
    const r = await create(body);
    expect(r.status).toBe(status);
    expect(r.body.error.code).toBe(code);
    const after = await app.request('GET', '/api/v1/runs?limit=500', { as });
    expect(after.body.items).toHaveLength(before.body.items.length);
  });

  it('refuses a disabled version with 409 DAG_VERSION_DISABLED', async () => {
    const v = await publishDag(app, app.tenantId, chainDag('to-disable', 1));
    await disableVersion(app, app.tenantId, 'to-disable', v);
    const r = await create({ dagId: 'to-disable', version: v, inputs: {}, runToken: 'd' });
    expect(r.status).toBe(409);
    expect(r.body.error.code).toBe('DAG_VERSION_DISABLED');
    const latest = await create({ dagId: 'to-disable', inputs: {}, runToken: 'd' });
    expect(latest.status).toBe(404);
  });

  it('creates each run with the version to use as versions are published, disabled and re-enabled between them', async () => {
    const version = async (body: Record<string, unknown>) => {
      const r = await create({ inputs: {}, ...body });
      expect(r.status).toBe(201);
      return (await app.request('GET', `/api/v1/runs/${r.body.runId}`, { as })).body.version as number;
    };
    const v1 = await publishDag(app, app.tenantId, chainDag('moving', 1));
    expect(await version({ dagId: 'moving', runToken: 'm1' })).toBe(v1);
    expect(await version({ dagId: 'moving', runToken: 'm2' })).toBe(v1);
    expect(await version({ dagId: 'moving', version: v1, runToken: 'm3' })).toBe(v1);
    const v2 = await publishDag(app, app.tenantId, chainDag('moving', 2));
    expect(await version({ dagId: 'moving', runToken: 'm4' })).toBe(v2);
    await disableVersion(app, app.tenantId, 'moving', v2);
    expect(await version({ dagId: 'moving', runToken: 'm5' })).toBe(v1);
    await disableVersion(app, app.tenantId, 'moving', v1);
    const pinned = await create({ dagId: 'moving', version: v1, inputs: {}, runToken: 'm6' });
    expect([pinned.status, pinned.body.error.code]).toEqual([409, 'DAG_VERSION_DISABLED']);
    const none = await create({ dagId: 'moving', inputs: {}, runToken: 'm7' });
    expect([none.status, none.body.error.code]).toEqual([404, 'DAG_NOT_FOUND']);
    const enabled = await app.request('POST', `/api/v1/dags/moving/versions/${v2}/enable`, { as });
    expect(enabled.status).toBe(200);
    expect(await version({ dagId: 'moving', runToken: 'm8' })).toBe(v2);
  });

  it('lists runs newest first with keyset page tokens and filters', async () => {
    for (let i = 0; i < 5; i++) await create({ dagId: 'chain3', inputs: { i }, runToken: `list-${i}` });
    const all: string[] = [];
    let token: string | null = null;
    do {
      const q: string = token ? `&pageToken=${token}` : '';
      const r = await app.request('GET', `/api/v1/runs?dagId=chain3&limit=2${q}`, { as });
      expect(r.status).toBe(200);
      all.push(...r.body.items.map((x: { runId: string }) => x.runId));
      token = r.body.nextPageToken;
    } while (token);
    const full = await app.request('GET', '/api/v1/runs?dagId=chain3&limit=500', { as });
    expect(all).toEqual(full.body.items.map((x: { runId: string }) => x.runId));
    const times = full.body.items.map((x: { startedUtc: string }) => x.startedUtc);
    expect([...times].sort().reverse()).toEqual(times);
    const none = await app.request(
      'GET',
      `/api/v1/runs?dagId=chain3&from=${new Date(Date.now() + 60_000).toISOString()}`,
      { as },
    );
    expect(none.body.items).toEqual([]);
    const bad = await app.request('GET', '/api/v1/runs?pageToken=garbage', { as });
    expect(bad.status).toBe(400);
    expect((await app.request('GET', '/api/v1/runs?status=weird', { as })).status).toBe(400);
  });

  it('records hash-chained events numbered without gaps, paged by after', async () => {
    const a = await create({ dagId: 'chain3', inputs: {}, runToken: 'events' });
    await app.request('POST', `/api/v1/runs/${a.body.runId}/cancel`, { as });
    const page1 = await app.request('GET', `/api/v1/runs/${a.body.runId}/events?limit=2`, { as });
    expect(page1.body.items.map((e: { seq: number }) => e.seq)).toEqual([1, 2]);
    const page2 = await app.request('GET', `/api/v1/runs/${a.body.runId}/events?after=${page1.body.nextAfter}`, { as });
    const events = [...page1.body.items, ...page2.body.items] as { seq: number; type: string; actor: string }[];
    expect(events.map((e) => e.type)).toEqual([
      'run.created',
      'step.queued',
      'step.cancelled',
      'step.cancelled',
      'step.cancelled',
      'run.cancelled',
    ]);
    expect(events.find((e) => e.type === 'run.cancelled')!.actor).toBe(`${app.tenantId}-admin`);
    const chained = events.map((e: any) => ({
      ...e,
      runId: a.body.runId,
      createdAt: e.createdUtc,
      tenantId: app.tenantId,
    })) as ChainedEvent[];
    expect(verifyChain(chained)).toEqual({ ok: true });
    chained[3] = { ...chained[3], actor: 'someone-else' };
    expect(verifyChain(chained).ok).toBe(false);
  });

  it('cancels idempotently and refuses to cancel a finished run', async () => {
    const a = await create({ dagId: 'chain3', inputs: {}, runToken: 'cancel' });
    const c1 = await app.request('POST', `/api/v1/runs/${a.body.runId}/cancel`, { as });
    expect(c1.status).toBe(200);
    expect(c1.body.status).toBe('cancelled');
    const c2 = await app.request('POST', `/api/v1/runs/${a.body.runId}/cancel`, { as });
    expect(c2.status).toBe(200);
    expect(c2.body.lastEventSeq).toBe(c1.body.lastEventSeq);
    const r = await app.request('GET', `/api/v1/runs/${a.body.runId}`, { as });
    expect(r.body.steps.every((s: { status: string }) => s.status === 'cancelled')).toBe(true);
    const rerun = await app.request('POST', `/api/v1/runs/${a.body.runId}/rerun`, { as, body: { fromStep: 's01' } });
    expect(rerun.status).toBe(409);
    expect(rerun.body.error.code).toBe('RUN_NOT_FAILED');
  });

  it('replays a run as a new run with the same version and inputs, linked by replayOf', async () => {
    const a = await create({ dagId: 'typed', inputs: { n: 42 }, runToken: 'replay' });
    const r = await app.request('POST', `/api/v1/runs/${a.body.runId}/replay`, { as });
    expect(r.status).toBe(201);
    expect(r.body.runId).not.toBe(a.body.runId);
    const n = await app.request('GET', `/api/v1/runs/${r.body.runId}`, { as });
    expect(n.body).toMatchObject({ replayOf: a.body.runId, inputs: { n: 42 }, dagId: 'typed' });
    const ev = await app.request('GET', `/api/v1/runs/${a.body.runId}/events`, { as });
    expect(ev.body.items.at(-1)).toMatchObject({ type: 'run.replayed', data: { newRunId: r.body.runId } });
  });

  it('documents every run and artifact route in the OpenAPI document', async () => {
    const r = await app.request('GET', '/api/v1/openapi.json');
    expect(r.status).toBe(200);
    const ops = Object.values(r.body.paths as Record<string, Record<string, { operationId: string }>>).flatMap((p) =>
      Object.values(p).map((o) => o.operationId),
    );
    for (const op of [
      'createRun',
      'listRuns',
      'getRun',
      'listStepAttempts',
      'listRunEvents',
      'cancelRun',
      'replayRun',
      'rerunRun',
      'getArtifact',
    ]) {
      expect(ops).toContain(op);
    }
  });

  it('answers 404 for unknown runs and 400 for malformed ids', async () => {
    const id = '00000000-0000-4000-8000-000000000000';
    expect((await app.request('GET', `/api/v1/runs/${id}`, { as })).status).toBe(404);
    expect((await app.request('GET', '/api/v1/runs/not-a-uuid', { as })).status).toBe(400);
    expect((await app.request('GET', `/api/v1/runs/${id}/events?after=-1`, { as })).status).toBe(400);
  });

  it('needs orchestrator:write to create or cancel runs', async () => {
    const reader = await app.token(app.tenantId, ['orchestrator:read']);
    const r = await create(
      { dagId: 'typed', inputs: { n: 1 }, runToken: 'ro' },
      { token: reader, tenantId: app.tenantId },
    );
    expect(r.status).toBe(403);
  });

  it('tenant B cannot read or change tenant A runs, steps, attempts or events (404)', async () => {
    const a = await create({ dagId: 'chain3', inputs: {}, runToken: 'xt' });
    const id = a.body.runId as string;
    const b = await app.tenant('tenant-b', ['orchestrator:admin']);
    const asB = { token: b.token, tenantId: b.tenantId };
    for (const [method, url, body] of [
      ['GET', `/api/v1/runs/${id}`],
      ['GET', `/api/v1/runs/${id}/events`],
      ['GET', `/api/v1/runs/${id}/steps/s01/attempts`],
      ['POST', `/api/v1/runs/${id}/cancel`],
      ['POST', `/api/v1/runs/${id}/replay`],
      ['POST', `/api/v1/runs/${id}/rerun`, { fromStep: 's01' }],
    ] as const) {
      const r = await app.request(method, url, { as: asB, body });
      expect([method, url, r.status]).toEqual([method, url, 404]);
    }
    const list = await app.request('GET', '/api/v1/runs', { as: asB });
    expect(list.body.items).toEqual([]);
    const still = await app.request('GET', `/api/v1/runs/${id}`, { as });
    expect(still.body.status).toBe('queued');
    // B starting a run of A's DAG id finds no such DAG.
    expect((await create({ dagId: 'chain3', inputs: {}, runToken: 'xt' }, asB)).status).toBe(404);
  });
});
