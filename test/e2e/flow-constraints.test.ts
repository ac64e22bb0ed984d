import { verifyChain } from '../../src/modules/runs/run-events';
import { startTestApp, type TestApp } from '../support/test-app';
import { chainOf, runEvents, waitForRun } from './runs-support';

type Step = { stepId: string; status: string; reason: string | null; error: { code: string; message: string } | null };

/** Constraint actions that end a step (fail, skip) and the queue-wait cap (dispatchTimeout). */
describe('constraint actions and dispatchTimeout', () => {
  let app: TestApp;
  let as: { token: string; tenantId: string };
  const publish = (body: unknown) => app.request('POST', '/api/v1/dags', { as, body });
  const start = async (dagId: string) => {
    const r = await app.request('POST', '/api/v1/runs', { as, body: { dagId, runToken: `${dagId}-${Math.random()}` } });
    expect(r.status).toBe(201);
    return r.body.runId as string;
  };
  const finished = async (runId: string) =>
    (await waitForRun(app, as, runId)) as { runId: string; status: string; steps: Step[] };
  const step = (r: { steps: Step[] }, id: string) => r.steps.find((s) => s.stepId === id)!;
  const events = (runId: string) => runEvents(app, as, runId);

  beforeAll(async () => {
    app = await startTestApp({ ORDO_ROLES: 'api,worker' });
    as = { token: app.adminToken, tenantId: app.tenantId };
  });
  afterAll(async () => app?.close());

  const slow = (constraints: unknown) => ({
    id: 'slow',
    plugin: 'noop',
    with: { sleepMs: 5000, output: { done: true } },
    constraints,
  });

  it('fails a step past maxExpectedRunTime with a fail action, and records the breach', async () => {
    expect(
      (
        await publish({
          id: 'expect-fail',
          steps: [slow({ maxExpectedRunTime: { after: '150ms', actions: [{ type: 'event' }, { type: 'fail' }] } })],
        })
      ).status,
    ).toBe(201);
    const r = await finished(await start('expect-fail'));
    expect(r.status).toBe('failed');
    expect(step(r, 'slow').error?.code).toBe('MAX_EXPECTED_RUN_TIME');
    const breach = (await events(r.runId)).find((e) => e.type === 'step.constraint_breached');
    expect(breach?.data).toMatchObject({ constraint: 'maxExpectedRunTime', afterMs: 150, effect: 'failed' });
  });

  it('skips a step past maxExpectedRunTime with a skip action; its dependents follow their rules and the chain verifies', async () => {
    expect(
      (
        await publish({
          id: 'expect-skip',
          steps: [
            slow({ maxExpectedRunTime: { after: '150ms', actions: [{ type: 'skip' }] } }),
            { id: 'next', plugin: 'noop', dependsOn: ['slow'] },
            { id: 'always', plugin: 'noop', dependsOn: ['slow'], trigger: 'all_done' },
          ],
        })
      ).status,
    ).toBe(201);
    const r = await finished(await start('expect-skip'));
    expect(r.status).toBe('succeeded');
    expect([step(r, 'slow').status, step(r, 'slow').reason]).toEqual(['skipped', 'max_expected_run_time']);
    expect([step(r, 'next').status, step(r, 'next').reason]).toEqual(['skipped', 'upstream_skipped']);
    expect(step(r, 'always').status).toBe('succeeded');
    const ev = await events(r.runId);
    expect(ev.find((e) => e.type === 'step.skipped' && e.stepId === 'slow')?.data).toEqual({
      reason: 'max_expected_run_time',
      afterMs: 150,
    });
    expect(ev.find((e) => e.type === 'step.constraint_breached')?.data).toMatchObject({ effect: 'skipped' });
    expect(verifyChain(chainOf(ev, as.tenantId, r.runId))).toEqual({ ok: true });
  });

  it('skips instead of failing a step killed at maxAllowedRunTime with a skip action', async () => {
    expect(
      (
        await publish({
          id: 'allowed-skip',
          steps: [slow({ maxAllowedRunTime: { after: '150ms', actions: [{ type: 'skip' }] } })],
        })
      ).status,
    ).toBe(201);
    const r = await finished(await start('allowed-skip'));
    expect(r.status).toBe('succeeded');
    expect([step(r, 'slow').status, step(r, 'slow').reason]).toEqual(['skipped', 'max_allowed_run_time']);
  });

  it('refuses a constraint that both fails and skips', async () => {
    const r = await publish({
      id: 'both',
      steps: [slow({ maxExpectedRunTime: { after: '1s', actions: [{ type: 'fail' }, { type: 'skip' }] } })],
    });
    expect(r.status).toBe(400);
    expect(r.body.error.code).toBe('DAG_INVALID');
    expect(JSON.stringify(r.body.error.details)).toContain('constraints.maxExpectedRunTime.actions');
  });

  it('fails, without running it, a step that waited longer than its dispatchTimeout for a slot', async () => {
    expect(
      (
        await publish({
          id: 'gated',
          steps: [{ id: 'one', plugin: 'noop', concurrency: 1, dispatchTimeout: '200ms', with: { sleepMs: 800 } }],
        })
      ).status,
    ).toBe(201);
    const first = await start('gated');
    const second = await start('gated');
    const [a, b] = [await finished(first), await finished(second)];
    expect(a.status).toBe('succeeded');
    expect(b.status).toBe('failed');
    expect(step(b, 'one').error?.code).toBe('DISPATCH_TIMEOUT');
    expect(step(b, 'one').error?.message).toMatch(
      /waited \d+ ms for a slot, longer than its dispatchTimeout of 200 ms/,
    );
  });
});
