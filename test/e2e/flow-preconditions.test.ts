import { sql } from 'kysely';
import { verifyChain } from '../../src/modules/runs/run-events';
import { startTestApp, type TestApp } from '../support/test-app';
import { chainOf, runEvents, waitForRun } from './runs-support';

type Step = {
  stepId: string;
  status: string;
  reason: string | null;
  attempts: number;
  dispatchSeq: number | null;
  error: { code: string; message: string } | null;
};
type Attempt = {
  attempt: number;
  status: string;
  claimedUtc: string;
  conditionPendingUtc: string | null;
  constraintCheckedUtc: string | null;
  startedUtc: string | null;
  terminatedUtc: string | null;
};

/** Step preconditions: CEL over inputs, upstream outputs and `now`, with onViolation wait | skip | fail. */
describe('step preconditions', () => {
  let app: TestApp;
  let as: { token: string; tenantId: string };
  const publish = (body: unknown) => app.request('POST', '/api/v1/dags', { as, body });
  const start = async (dagId: string, inputs: unknown = {}) => {
    const r = await app.request('POST', '/api/v1/runs', {
      as,
      body: { dagId, inputs, runToken: `${dagId}-${Math.random()}` },
    });
    expect(r.status).toBe(201);
    return r.body.runId as string;
  };
  const finished = async (runId: string) =>
    (await waitForRun(app, as, runId, 30_000)) as {
      runId: string;
      status: string;
      outputsHash: string;
      steps: Step[];
    };
  const step = (r: { steps: Step[] }, id: string) => r.steps.find((s) => s.stepId === id)!;
  const events = (runId: string) => runEvents(app, as, runId);
  const waitForStep = async (runId: string, stepId: string, status: string) => {
    for (let i = 0; i < 400; i++) {
      const r = (await app.request('GET', `/api/v1/runs/${runId}`, { as })).body as { steps: Step[] };
      if (step(r, stepId).status === status) return;
      await new Promise((res) => setTimeout(res, 10));
    }
    throw new Error(`${stepId} never became ${status}`);
  };
  const attempts = async (runId: string, stepId: string) =>
    (await app.request('GET', `/api/v1/runs/${runId}/steps/${stepId}/attempts`, { as })).body.items as Attempt[];
  const gated = (preconditions: unknown, extra: Record<string, unknown> = {}) => ({
    id: 'gated',
    plugin: 'noop',
    with: { output: { ran: true } },
    preconditions,
    ...extra,
  });

  beforeAll(async () => {
    app = await startTestApp({ ORDO_ROLES: 'api,worker,scheduler' });
    as = { token: app.adminToken, tenantId: app.tenantId };
    const dags = [
      {
        id: 'pre-skip',
        steps: [
          gated({ expressions: ['inputs.ready == true'], onViolation: 'skip' }),
          { id: 'next', plugin: 'noop', dependsOn: ['gated'] },
          { id: 'always', plugin: 'noop', dependsOn: ['gated'], trigger: 'all_done' },
        ],
      },
      {
        id: 'pre-fail',
        steps: [
          gated({ expressions: ['inputs.ready == true'], onViolation: 'fail' }),
          { id: 'next', plugin: 'noop', dependsOn: ['gated'] },
        ],
      },
      {
        id: 'pre-wait',
        steps: [
          gated({
            expressions: ['now >= timestamp(inputs.at)'],
            onViolation: 'wait',
            maxWait: '1m',
            checkEvery: '500ms',
          }),
          { id: 'next', plugin: 'noop', dependsOn: ['gated'] },
        ],
      },
      {
        id: 'pre-timeout',
        steps: [
          gated({ expressions: ['inputs.ready == true'], onViolation: 'wait', maxWait: '1s', checkEvery: '500ms' }),
          { id: 'next', plugin: 'noop', dependsOn: ['gated'] },
        ],
      },
      {
        id: 'pre-chain',
        steps: [
          { id: 'a', plugin: 'noop', with: { output: { n: 2 } } },
          {
            id: 'b',
            plugin: 'noop',
            dependsOn: ['a'],
            preconditions: { expressions: ['inputs.ready == true', 'steps.a.outputs.n > 1'], onViolation: 'skip' },
          },
          { id: 'c', plugin: 'noop', dependsOn: ['b'], trigger: 'all_done' },
        ],
      },
    ];
    for (const d of dags) expect((await publish(d)).status).toBe(201);
  });
  afterAll(async () => app?.close());

  it('skips a step whose precondition is false with onViolation skip, naming the expression; dependents follow their trigger rules', async () => {
    const r = await finished(await start('pre-skip', { ready: false }));
    expect(r.status).toBe('succeeded');
    expect([step(r, 'gated').status, step(r, 'gated').reason]).toEqual(['skipped', 'precondition_false']);
    expect([step(r, 'next').status, step(r, 'next').reason]).toEqual(['skipped', 'upstream_skipped']);
    expect(step(r, 'always').status).toBe('succeeded');
    const ev = await events(r.runId);
    expect(ev.find((e) => e.type === 'step.skipped' && e.stepId === 'gated')?.data).toMatchObject({
      reason: 'precondition_false',
      holds: false,
      index: 0,
      expression: 'inputs.ready == true',
    });
    expect(verifyChain(chainOf(ev, as.tenantId, r.runId))).toEqual({ ok: true });
  });

  it('fails a step whose precondition is false with onViolation fail (PRECONDITION_FAILED), without running it', async () => {
    const r = await finished(await start('pre-fail', { ready: false }));
    expect(r.status).toBe('failed');
    expect(step(r, 'gated').status).toBe('failed');
    expect(step(r, 'gated').error?.code).toBe('PRECONDITION_FAILED');
    expect(step(r, 'gated').error?.message).toContain('inputs.ready == true');
    expect([step(r, 'next').status, step(r, 'next').reason]).toEqual(['skipped', 'upstream_failed']);
    expect((await events(r.runId)).some((e) => e.type === 'step.succeeded' && e.stepId === 'gated')).toBe(false);
  });

  it('runs a step whose preconditions hold, recording the check in its events', async () => {
    const r = await finished(await start('pre-fail', { ready: true }));
    expect(r.status).toBe('succeeded');
    const checked = (await events(r.runId)).filter((e) => e.type === 'step.precondition_checked');
    expect(checked.map((e) => [e.stepId, e.data.holds])).toEqual([['gated', true]]);
    const [a] = await attempts(r.runId, 'gated');
    expect(a.conditionPendingUtc).toBeNull();
  });

  it('fails a step whose precondition cannot be evaluated (PRECONDITION_ERROR)', async () => {
    const r = await finished(await start('pre-wait', {}));
    expect(r.status).toBe('failed');
    expect(step(r, 'gated').error?.code).toBe('PRECONDITION_ERROR');
  });

  it('waits without a slot or a lease until a precondition on now holds, then runs the step in the same attempt; the ConditionPending phase is recorded', async () => {
    const at = new Date(Date.now() + 2_000).toISOString();
    const runId = await start('pre-wait', { at });
    // While it waits (the precondition holds 2 s after the start): no queue item, so no slot and no lease.
    await waitForStep(runId, 'gated', 'waiting');
    const held = await app.ordo.database.withSystem(
      async (tx) =>
        (await sql<{ n: number }>`select count(*)::int as n from queue_item where run_id = ${runId}`.execute(tx))
          .rows[0].n,
    );
    expect(held).toBe(0);
    const r = await finished(runId);
    expect(r.status).toBe('succeeded');
    expect(step(r, 'gated').status).toBe('succeeded');
    expect(step(r, 'gated').attempts).toBe(1);
    const ev = (await events(runId)).filter((e) => e.stepId === 'gated');
    const types = ev.map((e) => e.type);
    expect(types.slice(0, 3)).toEqual(['step.queued', 'step.running', 'step.waiting']);
    expect(ev[2].data).toMatchObject({ kind: 'precondition', holds: false, expression: 'now >= timestamp(inputs.at)' });
    const checks = ev.filter((e) => e.type === 'step.precondition_checked');
    expect(checks.length).toBeGreaterThanOrEqual(1);
    expect(checks.at(-1)!.data).toMatchObject({ holds: true });
    expect(checks.slice(0, -1).every((c) => c.data.holds === false)).toBe(true);
    expect(checks.map((c) => c.data.check)).toEqual(checks.map((_, i) => i + 1));
    expect(types.slice(-3)).toEqual(['step.queued', 'step.running', 'step.succeeded']);
    expect(ev.slice(1).map((e) => e.attempt)).toEqual(ev.slice(1).map(() => 1));
    const list = await attempts(runId, 'gated');
    expect(list).toHaveLength(1);
    const [a] = list;
    expect(a.status).toBe('succeeded');
    expect(a.conditionPendingUtc).not.toBeNull();
    expect(Date.parse(a.claimedUtc)).toBeLessThanOrEqual(Date.parse(a.conditionPendingUtc!));
    expect(Date.parse(a.conditionPendingUtc!)).toBeLessThanOrEqual(Date.parse(a.constraintCheckedUtc!));
    expect(Date.parse(a.constraintCheckedUtc!)).toBeGreaterThanOrEqual(Date.parse(at));
    expect(Date.parse(a.constraintCheckedUtc!)).toBeLessThanOrEqual(Date.parse(a.startedUtc!));
    expect(verifyChain(chainOf(await events(runId), as.tenantId, runId))).toEqual({ ok: true });
  });

  it('fails a step whose preconditions still do not hold after maxWait (PRECONDITION_TIMEOUT), recording each check', async () => {
    const r = await finished(await start('pre-timeout', { ready: false }));
    expect(r.status).toBe('failed');
    expect(step(r, 'gated').error?.code).toBe('PRECONDITION_TIMEOUT');
    expect([step(r, 'next').status, step(r, 'next').reason]).toEqual(['skipped', 'upstream_failed']);
    const ev = (await events(r.runId)).filter((e) => e.stepId === 'gated');
    const checks = ev.filter((e) => e.type === 'step.precondition_checked');
    expect(checks.at(-1)!.data).toMatchObject({ holds: false, timedOut: true, expression: 'inputs.ready == true' });
    expect(ev.at(-1)!.type).toBe('step.failed');
    const [a] = await attempts(r.runId, 'gated');
    expect(a.status).toBe('failed');
    expect(a.conditionPendingUtc).not.toBeNull();
    expect(a.startedUtc).toBeNull();
    expect(Date.parse(a.terminatedUtc!) - Date.parse(a.conditionPendingUtc!)).toBeGreaterThanOrEqual(1_000);
  });

  it('carries the precondition checks and the ConditionPending phase into the NDJSON export', async () => {
    const runId = await start('pre-timeout', { ready: false });
    await finished(runId);
    const r = await app.request('GET', '/api/v1/export', { as });
    expect(r.status).toBe(200);
    const lines = r.text
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    const mine = lines.filter((l) => l.runId === runId);
    expect(mine.some((l) => l.type === 'event' && l.eventType === 'step.precondition_checked')).toBe(true);
    const attempt = mine.find((l) => l.type === 'attempt' && l.stepId === 'gated')!;
    expect(attempt.conditionPendingUtc).toEqual(expect.any(String));
  });

  it('reads upstream outputs and checks every expression in order', async () => {
    const skipped = await finished(await start('pre-chain', { ready: false }));
    expect([step(skipped, 'b').status, step(skipped, 'b').reason]).toEqual(['skipped', 'precondition_false']);
    expect(step(skipped, 'c').status).toBe('succeeded');
    const ran = await finished(await start('pre-chain', { ready: true }));
    expect(step(ran, 'b').status).toBe('succeeded');
  });

  it('shows preconditions in the graph (JSON and DOT)', async () => {
    const json = await app.request('GET', '/api/v1/dags/pre-wait/versions/1/graph', { as });
    expect((json.body.nodes as { id: string; preconditions?: unknown }[]).find((n) => n.id === 'gated')).toMatchObject({
      preconditions: { expressions: ['now >= timestamp(inputs.at)'], onViolation: 'wait' },
    });
    const dot = await app.request('GET', '/api/v1/dags/pre-wait/versions/1/graph?format=dot', { as });
    expect(dot.text).toContain('wait unless now >= timestamp(inputs.at)');
  });

  it('refuses invalid preconditions at publish (400 DAG_INVALID naming the step) and stores nothing', async () => {
    const cases: [unknown, string][] = [
      [{ expressions: ['inputs.ready =='] }, 'preconditions.expressions.0'],
      [{ expressions: ['true', '"text"'] }, 'preconditions.expressions.1'],
      [{ expressions: ['steps.other.outputs.x == 1'] }, 'preconditions.expressions.0'],
      [{ expressions: ['true'], onViolation: 'wait' }, 'maxWait'],
      [{ expressions: ['true'], onViolation: 'later' }, 'onViolation'],
      [{ expressions: [] }, 'expressions'],
    ];
    for (const [preconditions, where] of cases) {
      const r = await publish({
        id: 'pre-bad',
        steps: [{ id: 'other', plugin: 'noop' }, gated(preconditions)],
      });
      expect(r.status).toBe(400);
      expect(r.body.error.code).toBe('DAG_INVALID');
      expect(JSON.stringify(r.body.error)).toContain(where);
    }
    const bad = await publish({ id: 'pre-bad', steps: [gated({ expressions: ['inputs.x +'] })] });
    expect(bad.body.error.message).toContain('step "gated"');
    expect((await app.request('GET', '/api/v1/dags/pre-bad', { as })).status).toBe(404);
  });

  it('gives the same steps, dispatch order, events and outputs hash on every run of a time-independent precondition', async () => {
    const shape = async (r: Awaited<ReturnType<typeof finished>>) => ({
      steps: r.steps.map((s) => [s.stepId, s.status, s.reason, s.dispatchSeq]).sort(),
      events: (await events(r.runId)).map((e) => {
        const { now: _now, ...data } = e.data;
        return [e.type, e.stepId, e.attempt, e.type.startsWith('step.') && e.type !== 'step.running' ? data : null];
      }),
      outputsHash: r.outputsHash,
    });
    for (const inputs of [{ ready: true }, { ready: false }]) {
      const want = await shape(await finished(await start('pre-chain', inputs)));
      for (let i = 1; i < 20; i++) expect(await shape(await finished(await start('pre-chain', inputs)))).toEqual(want);
    }
  });
});
