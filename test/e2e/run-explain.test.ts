import { startTestApp, type TestApp } from '../support/test-app';
import { runEvents } from './runs-support';

type As = { token: string; tenantId: string };
type Explained = { stepId: string; status: string; reason: string; [k: string]: unknown };
type Explanation = {
  runId: string;
  status: string;
  waiting: { reason: string; stepId: string } | null;
  steps: Explained[];
};

const LONG = 600_000;

/**
 * GET /api/v1/runs/{runId}/explain: each reason a step does not run, reproduced for real through
 * the engine (api, worker and scheduler roles; a tenant cap of 2 steps in flight), and the run's
 * record showing the headline of the same computation.
 */
describe('why a run is waiting (api + worker + scheduler)', () => {
  let app: TestApp;
  let n = 0;

  beforeAll(async () => {
    app = await startTestApp({
      ORDO_ROLES: 'api,worker,scheduler',
      ORDO_TENANT_MAX_IN_FLIGHT: '2',
      ORDO_TENANT_SHARED_IN_FLIGHT: '0',
    });
  });
  afterAll(async () => app?.close());

  /** A tenant of its own for each case, so that steps in flight are counted per case. */
  const tenant = async (...dags: unknown[]): Promise<As> => {
    const t = await app.tenant(`explain-${++n}`, ['orchestrator:admin']);
    for (const body of dags) {
      const r = await app.request('POST', '/api/v1/dags', { as: t, body });
      expect(r.status).toBe(201);
    }
    return t;
  };
  const start = async (as: As, dagId: string, extra: Record<string, unknown> = {}) => {
    const r = await app.request('POST', '/api/v1/runs', {
      as,
      body: { dagId, runToken: `${dagId}-${Math.random()}`, ...extra },
    });
    expect(r.status).toBe(201);
    return r.body.runId as string;
  };
  const explain = async (as: As, runId: string): Promise<Explanation> => {
    const r = await app.request('GET', `/api/v1/runs/${runId}/explain`, { as });
    expect(r.status).toBe(200);
    return r.body as Explanation;
  };
  /** Reads the explanation until `ok` holds (bounded). */
  const explainUntil = async (as: As, runId: string, ok: (e: Explanation) => boolean): Promise<Explanation> => {
    let e = await explain(as, runId);
    for (let i = 0; i < 800 && !ok(e); i++) {
      await new Promise((r) => setTimeout(r, 25));
      e = await explain(as, runId);
    }
    if (!ok(e)) throw new Error(`explanation never matched: ${JSON.stringify(e)}`);
    return e;
  };
  const step = (e: Explanation, id: string) => e.steps.find((s) => s.stepId === id)!;
  const reasonOf = (id: string, reason: string) => (e: Explanation) => step(e, id)?.reason === reason;
  const record = async (as: As, runId: string) => (await app.request('GET', `/api/v1/runs/${runId}`, { as })).body;
  const cancel = async (as: As, ...runIds: string[]) => {
    for (const id of runIds) expect((await app.request('POST', `/api/v1/runs/${id}/cancel`, { as })).status).toBe(200);
  };

  it('names the dependencies a step waits on, and who runs the step they wait for', async () => {
    const as = await tenant({
      id: 'pair',
      steps: [
        { id: 'a', plugin: 'noop', with: { sleepMs: LONG } },
        { id: 'b', plugin: 'noop', dependsOn: ['a'] },
        { id: 'c', plugin: 'noop', dependsOn: ['a', 'b'] },
      ],
    });
    const runId = await start(as, 'pair');
    const e = await explainUntil(as, runId, reasonOf('a', 'running'));
    expect(e.status).toBe('running');
    expect(step(e, 'a')).toEqual({
      stepId: 'a',
      status: 'running',
      reason: 'running',
      worker: expect.any(String),
      leaseExpiresAt: expect.stringMatching(/Z$/),
    });
    expect(step(e, 'b')).toEqual({ stepId: 'b', status: 'pending', reason: 'dependencies', waitingOn: ['a'] });
    expect(step(e, 'c')).toEqual({ stepId: 'c', status: 'pending', reason: 'dependencies', waitingOn: ['a', 'b'] });
    // Nothing holds the run up but its running step.
    expect(e.waiting).toBeNull();
    expect((await record(as, runId)).waiting).toBeNull();

    // A finished run has nothing to explain.
    await cancel(as, runId);
    const done = await explain(as, runId);
    expect(done).toEqual({ runId, status: 'cancelled', waiting: null, steps: [] });
    expect((await record(as, runId)).waiting).toBeNull();
  });

  it("holds ready steps at the tenant's cap of steps in flight", async () => {
    const as = await tenant({
      id: 'wide',
      steps: ['a', 'b', 'c', 'd', 'e'].map((id) => ({ id, plugin: 'noop', with: { sleepMs: LONG } })),
    });
    const runId = await start(as, 'wide');
    const e = await explainUntil(as, runId, (x) => x.steps.filter((s) => s.reason === 'running').length >= 2);
    const held = e.steps.filter((s) => s.status === 'queued');
    expect(held.length).toBeGreaterThan(0);
    for (const s of held)
      expect(s).toEqual({
        stepId: s.stepId,
        status: 'queued',
        reason: 'tenant_in_flight_cap',
        inFlight: e.steps.length - held.length,
        cap: 2,
        shared: false,
      });
    expect(e.waiting).toEqual({ reason: 'tenant_in_flight_cap', stepId: held[0].stepId });
    expect((await record(as, runId)).waiting).toEqual(e.waiting);
    await cancel(as, runId);
  });

  it("holds ready steps at the cap of the tenant's plan", async () => {
    const as = await tenant({
      id: 'planned',
      steps: ['a', 'b', 'c'].map((id) => ({ id, plugin: 'noop', with: { sleepMs: LONG } })),
    });
    // The tenant's plan caps its steps in flight at 1, below the instance's 2.
    const operator = { token: app.platformToken };
    const plan = { id: 'one-at-a-time', limits: { maxStepsInFlight: 1 } };
    expect((await app.request('POST', '/api/v1/plans', { as: operator, body: plan })).status).toBe(201);
    const assigned = await app.request('PUT', `/api/v1/tenants/${as.tenantId}/plan`, {
      as: operator,
      body: { planId: 'one-at-a-time' },
    });
    expect(assigned.status).toBe(200);
    const runId = await start(as, 'planned');
    const e = await explainUntil(as, runId, (x) => x.steps.some((s) => s.reason === 'running'));
    const held = e.steps.filter((s) => s.status === 'queued');
    expect(held.length).toBeGreaterThan(0);
    for (const s of held)
      expect(s).toEqual({
        stepId: s.stepId,
        status: 'queued',
        reason: 'plan_limit',
        limit: 'maxStepsInFlight',
        inFlight: e.steps.length - held.length,
        cap: 1,
      });
    expect((await record(as, runId)).waiting).toEqual({ reason: 'plan_limit', stepId: held[0].stepId });
    await cancel(as, runId);
  });

  it("holds a step under its full concurrency gate, and its run's record says so", async () => {
    const as = await tenant({
      id: 'gated',
      steps: [{ id: 'g', plugin: 'noop', concurrency: 1, with: { sleepMs: LONG } }],
    });
    const first = await start(as, 'gated');
    await explainUntil(as, first, reasonOf('g', 'running'));
    const second = await start(as, 'gated');
    const e = await explainUntil(as, second, reasonOf('g', 'concurrency_gate'));
    expect(e.steps).toEqual([
      { stepId: 'g', status: 'queued', reason: 'concurrency_gate', gate: 'gated/g', limit: 1, running: 1 },
    ]);
    expect(e.waiting).toEqual({ reason: 'concurrency_gate', stepId: 'g' });
    expect((await record(as, second)).waiting).toEqual({ reason: 'concurrency_gate', stepId: 'g' });
    await cancel(as, second, first);
  });

  it('queues a run behind its DAG maxConcurrentRuns, oldest first', async () => {
    const as = await tenant({
      id: 'solo',
      constraints: { maxConcurrentRuns: { limit: 1, action: 'queue' } },
      steps: [
        { id: 'x', plugin: 'noop', with: { sleepMs: LONG } },
        { id: 'y', plugin: 'noop', dependsOn: ['x'] },
      ],
    });
    const first = await start(as, 'solo');
    await explainUntil(as, first, reasonOf('x', 'running'));
    const second = await start(as, 'solo');
    const third = await start(as, 'solo');
    const e2 = await explain(as, second);
    expect(e2.status).toBe('queued');
    expect(e2.steps).toEqual([
      { stepId: 'x', status: 'pending', reason: 'max_concurrent_runs', limit: 1, running: 1, runsAhead: 0 },
      { stepId: 'y', status: 'pending', reason: 'dependencies', waitingOn: ['x'] },
    ]);
    expect(e2.waiting).toEqual({ reason: 'max_concurrent_runs', stepId: 'x' });
    expect(step(await explain(as, third), 'x')).toMatchObject({ reason: 'max_concurrent_runs', runsAhead: 1 });
    expect((await record(as, third)).waiting).toEqual({ reason: 'max_concurrent_runs', stepId: 'x' });
    await cancel(as, third, second, first);
  });

  it('waits for an approval until its timeout, and for a signal by name and key', async () => {
    const as = await tenant(
      { id: 'gatekeeper', steps: [{ id: 'review', plugin: 'approval', with: { timeout: '1h' } }] },
      {
        id: 'paid',
        steps: [{ id: 'settled', plugin: 'signal', with: { name: 'payment.settled', correlationKey: 'order-7' } }],
      },
    );
    const approval = await start(as, 'gatekeeper');
    const a = await explainUntil(as, approval, reasonOf('review', 'approval'));
    const r = step(a, 'review');
    expect(r).toEqual({
      stepId: 'review',
      status: 'waiting',
      reason: 'approval',
      since: expect.stringMatching(/Z$/),
      timeoutAt: expect.stringMatching(/Z$/),
    });
    expect(Date.parse(r.timeoutAt as string) - Date.parse(r.since as string)).toBe(3_600_000);
    const waitingEvent = (await runEvents(app, as, approval)).find((x) => x.type === 'step.waiting')!;
    expect(r.since).toBe(waitingEvent.createdUtc);
    expect((await record(as, approval)).waiting).toEqual({ reason: 'approval', stepId: 'review' });

    const signal = await start(as, 'paid');
    const s = await explainUntil(as, signal, reasonOf('settled', 'signal'));
    expect(step(s, 'settled')).toEqual({
      stepId: 'settled',
      status: 'waiting',
      reason: 'signal',
      name: 'payment.settled',
      correlationKey: 'order-7',
      since: expect.stringMatching(/Z$/),
    });
    expect(s.waiting).toEqual({ reason: 'signal', stepId: 'settled' });
    await cancel(as, approval, signal);
  });

  it('shows a retry waiting out its backoff until the time its retry is queued', async () => {
    const as = await tenant({
      id: 'flaky',
      steps: [
        {
          id: 'f',
          plugin: 'noop',
          with: { fail: true, retryable: true },
          retry: { maxRetries: 3, initialDelay: '1h', multiplier: 2, maxDelay: '2h' },
        },
      ],
    });
    const runId = await start(as, 'flaky');
    const e = await explainUntil(as, runId, reasonOf('f', 'backoff'));
    const retrying = (await runEvents(app, as, runId)).find((x) => x.type === 'step.retrying')!;
    expect(retrying.data.retryInMs).toBe(3_600_000);
    expect(step(e, 'f')).toEqual({
      stepId: 'f',
      status: 'retrying',
      reason: 'backoff',
      until: new Date(Date.parse(retrying.createdUtc) + 3_600_000).toISOString(),
      nextAttempt: 2,
      error: 'NOOP_FAIL',
    });
    expect((await record(as, runId)).waiting).toEqual({ reason: 'backoff', stepId: 'f' });
    await cancel(as, runId);
  });

  it('says that no external worker matches a queue step', async () => {
    const as = await tenant({
      id: 'offload',
      steps: [{ id: 'q', plugin: 'queue', with: { taskType: 'resize', pool: 'gpu' } }],
    });
    const runId = await start(as, 'offload');
    const e = await explainUntil(as, runId, reasonOf('q', 'no_matching_worker'));
    expect(step(e, 'q')).toMatchObject({
      status: 'waiting',
      reason: 'no_matching_worker',
      pool: 'gpu',
      taskType: 'resize',
    });
    expect((await record(as, runId)).waiting).toEqual({ reason: 'no_matching_worker', stepId: 'q' });
    await cancel(as, runId);
  });

  it("names the external worker running a queue step's task, and says when the workers that fit are busy", async () => {
    const as = await tenant({
      id: 'render',
      steps: [{ id: 'q', plugin: 'queue', with: { taskType: 'render', pool: 'cpu' } }],
    });
    const minted = await app.request('POST', '/api/v1/tokens', {
      as,
      body: { scopes: ['worker'], pool: 'cpu', subject: 'renderer' },
    });
    expect(minted.status).toBe(201);
    const w = { token: minted.body.token as string, tenantId: as.tenantId };
    const reg = await app.request('POST', '/api/v1/workers', {
      as: w,
      body: { name: 'renderer-1', taskTypes: [{ name: 'render' }], maxConcurrent: 1 },
    });
    expect(reg.status).toBe(201);
    const workerId = reg.body.workerId as string;

    const first = await start(as, 'render');
    const taken = await app.request('GET', `/api/v1/workers/${workerId}/tasks/next?waitMs=5000`, { as: w });
    expect(taken.status).toBe(200);
    const e1 = await explainUntil(as, first, reasonOf('q', 'running'));
    expect(step(e1, 'q')).toEqual({
      stepId: 'q',
      status: 'waiting',
      reason: 'running',
      worker: 'renderer-1',
      workerId,
      pool: 'cpu',
      taskType: 'render',
    });
    expect(e1.waiting).toBeNull();

    const second = await start(as, 'render');
    const e2 = await explainUntil(as, second, reasonOf('q', 'workers_busy'));
    expect(step(e2, 'q')).toMatchObject({ status: 'waiting', reason: 'workers_busy', pool: 'cpu', taskType: 'render' });
    expect((await record(as, second)).waiting).toEqual({ reason: 'workers_busy', stepId: 'q' });
    await cancel(as, second, first);
  });

  it('shows a scheduled run waiting for its start time', async () => {
    const as = await tenant({
      id: 'later',
      steps: [
        { id: 'first', plugin: 'noop' },
        { id: 'then', plugin: 'noop', dependsOn: ['first'] },
      ],
    });
    const at = new Date(Date.now() + 24 * 3600 * 1000);
    at.setUTCMilliseconds(0);
    const runId = await start(as, 'later', { notBefore: at.toISOString() });
    const e = await explain(as, runId);
    expect(e).toEqual({
      runId,
      status: 'scheduled',
      waiting: { reason: 'scheduled', stepId: 'first' },
      steps: [
        { stepId: 'first', status: 'pending', reason: 'scheduled', at: at.toISOString() },
        { stepId: 'then', status: 'pending', reason: 'dependencies', waitingOn: ['first'] },
      ],
    });
    expect((await record(as, runId)).waiting).toEqual({ reason: 'scheduled', stepId: 'first' });
    await cancel(as, runId);
  });

  it('shows a step waiting for its preconditions to hold', async () => {
    const as = await tenant({
      id: 'guarded',
      steps: [
        {
          id: 'publish',
          plugin: 'noop',
          preconditions: { expressions: ['inputs.go == true'], onViolation: 'wait', maxWait: '1h', checkEvery: '1h' },
        },
      ],
    });
    const runId = await start(as, 'guarded', { inputs: { go: false } });
    const e = await explainUntil(as, runId, reasonOf('publish', 'condition_pending'));
    expect(step(e, 'publish')).toEqual({
      stepId: 'publish',
      status: 'waiting',
      reason: 'condition_pending',
      since: expect.stringMatching(/Z$/),
      expression: 'inputs.go == true',
      checkEveryMs: 3_600_000,
      maxWaitMs: 3_600_000,
    });
    expect((await record(as, runId)).waiting).toEqual({ reason: 'condition_pending', stepId: 'publish' });
    await cancel(as, runId);
  });

  it('shows a map step waiting for its instances, and instances under its maxParallel gate', async () => {
    const as = await tenant({
      id: 'fanout',
      steps: [{ id: 'm', plugin: 'noop', map: '${{ inputs.items }}', maxParallel: 1, with: { sleepMs: LONG } }],
    });
    const runId = await start(as, 'fanout', { inputs: { items: [1, 2, 3] } });
    const e = await explainUntil(as, runId, (x) => step(x, 'm[0]')?.reason === 'running');
    expect(step(e, 'm')).toEqual({ stepId: 'm', status: 'waiting', reason: 'map_instances', total: 3, left: 3 });
    for (const id of ['m[1]', 'm[2]'])
      expect(step(e, id)).toEqual({
        stepId: id,
        status: 'queued',
        reason: 'concurrency_gate',
        gate: `map/${runId}/m`,
        limit: 1,
        running: 1,
      });
    await cancel(as, runId);
  });

  it('shows a dag step waiting for its child run', async () => {
    const as = await tenant(
      { id: 'child', steps: [{ id: 'work', plugin: 'noop', with: { sleepMs: LONG } }] },
      { id: 'parent', steps: [{ id: 'sub', plugin: 'dag', with: { dag: 'child' } }] },
    );
    const runId = await start(as, 'parent');
    const e = await explainUntil(as, runId, reasonOf('sub', 'child_run'));
    const sub = step(e, 'sub');
    expect(sub).toEqual({
      stepId: 'sub',
      status: 'waiting',
      reason: 'child_run',
      childRunId: expect.any(String),
      childStatus: expect.stringMatching(/^(queued|running)$/),
    });
    expect((await record(as, runId)).steps.find((x: { stepId: string }) => x.stepId === 'sub').childRunId).toBe(
      sub.childRunId,
    );
    await cancel(as, runId);
  });

  it("answers 404 for another tenant's run, as for a run nobody has", async () => {
    const a = await tenant({ id: 'mine', steps: [{ id: 'x', plugin: 'noop', with: { sleepMs: LONG } }] });
    const b = await tenant();
    const runId = await start(a, 'mine');
    for (const id of [runId, '00000000-0000-4000-8000-000000000000']) {
      const r = await app.request('GET', `/api/v1/runs/${id}/explain`, { as: b });
      expect(r.status).toBe(404);
      expect(r.body.error.code).toBe('RUN_NOT_FOUND');
    }
    await cancel(a, runId);
  });
});

/**
 * While other tenants have work, the claim holds each tenant to the shared cap
 * (ORDO_TENANT_SHARED_IN_FLIGHT): the explanation names that cap.
 */
describe('the shared cap (api + worker)', () => {
  let app: TestApp;
  afterAll(async () => app?.close());

  it('explains the cap the claim applies while another tenant has work', async () => {
    app = await startTestApp({
      ORDO_ROLES: 'api,worker',
      ORDO_TENANT_MAX_IN_FLIGHT: '4',
      ORDO_TENANT_SHARED_IN_FLIGHT: '1',
    });
    const body = {
      id: 'busy',
      steps: ['a', 'b', 'c', 'd', 'e', 'f'].map((id) => ({ id, plugin: 'noop', with: { sleepMs: LONG } })),
    };
    const one = await app.tenant('share-one', ['orchestrator:admin']);
    const other = await app.tenant('share-other', ['orchestrator:admin']);
    for (const as of [one, other]) expect((await app.request('POST', '/api/v1/dags', { as, body })).status).toBe(201);
    const started = async (as: As) =>
      (await app.request('POST', '/api/v1/runs', { as, body: { dagId: 'busy', runToken: 'r' } })).body.runId as string;
    const mine = await started(one);
    const theirs = await started(other);
    let e: Explanation | undefined;
    for (let i = 0; i < 800; i++) {
      e = (await app.request('GET', `/api/v1/runs/${mine}/explain`, { as: one })).body as Explanation;
      if (e.steps.some((s) => s.reason === 'tenant_in_flight_cap')) break;
      await new Promise((r) => setTimeout(r, 25));
    }
    const held = e!.steps.filter((s) => s.status === 'queued');
    expect(held.length).toBeGreaterThan(0);
    for (const s of held) expect(s).toMatchObject({ reason: 'tenant_in_flight_cap', cap: 1, shared: true });
    for (const [as, id] of [
      [one, mine],
      [other, theirs],
    ] as const)
      expect((await app.request('POST', `/api/v1/runs/${id}/cancel`, { as })).status).toBe(200);
  });
});

/** With no worker role, queued steps wait to be claimed: ready, in the order the claim takes them. */
describe('ready steps (api only)', () => {
  let app: TestApp;
  afterAll(async () => app?.close());

  it('lists ready steps with the ready steps ahead of them, and the run as waiting to be claimed', async () => {
    app = await startTestApp();
    const as = { token: app.adminToken, tenantId: app.tenantId };
    const body = {
      id: 'fan',
      steps: [
        { id: 'a', plugin: 'noop' },
        { id: 'b', plugin: 'noop' },
        { id: 'c', plugin: 'noop', dependsOn: ['a', 'b'] },
      ],
    };
    expect((await app.request('POST', '/api/v1/dags', { as, body })).status).toBe(201);
    const r = await app.request('POST', '/api/v1/runs', { as, body: { dagId: 'fan', runToken: 'one' } });
    const runId = r.body.runId as string;
    const e = (await app.request('GET', `/api/v1/runs/${runId}/explain`, { as })).body as Explanation;
    expect(e).toEqual({
      runId,
      status: 'queued',
      waiting: { reason: 'ready', stepId: 'a' },
      steps: [
        { stepId: 'a', status: 'queued', reason: 'ready', ahead: 0 },
        { stepId: 'b', status: 'queued', reason: 'ready', ahead: 1 },
        { stepId: 'c', status: 'pending', reason: 'dependencies', waitingOn: ['a', 'b'] },
      ],
    });
    expect((await app.request('GET', `/api/v1/runs/${runId}`, { as })).body.waiting).toEqual(e.waiting);
  });
});
