import { sql } from 'kysely';
import { verifyChain } from '../../src/modules/runs/run-events';
import { startTestApp, type TestApp } from '../support/test-app';
import { chainOf, runEvents, waitForRun } from './runs-support';

type Step = {
  stepId: string;
  status: string;
  reason: string | null;
  namedStatus: string | null;
  outputs: unknown;
  error: { code: string } | null;
};

/** Approval steps: they wait holding nothing, a decision (or its timeout) moves the run on. */
describe('approval steps and decisions', () => {
  let app: TestApp;
  let as: { token: string; tenantId: string };
  const publish = (body: unknown) => app.request('POST', '/api/v1/dags', { as, body });
  const start = async (dagId: string) => {
    const r = await app.request('POST', '/api/v1/runs', { as, body: { dagId, runToken: `${dagId}-${Math.random()}` } });
    expect(r.status).toBe(201);
    return r.body.runId as string;
  };
  const run = async (runId: string) =>
    (await app.request('GET', `/api/v1/runs/${runId}`, { as })).body as { status: string; steps: Step[] };
  const step = (r: { steps: Step[] }, id: string) => r.steps.find((s) => s.stepId === id)!;
  const waitFor = async (runId: string, stepId: string, status: string) => {
    for (let i = 0; i < 400; i++) {
      if (step(await run(runId), stepId).status === status) return;
      await new Promise((r) => setTimeout(r, 25));
    }
    throw new Error(`${stepId} never became ${status}`);
  };
  const decide = (runId: string, stepId: string, body: unknown, who = as) =>
    app.request('POST', `/api/v1/runs/${runId}/steps/${stepId}/decision`, { as: who, body });
  const events = (runId: string) => runEvents(app, as, runId);

  beforeAll(async () => {
    app = await startTestApp({ ORDO_ROLES: 'api,worker,scheduler' });
    as = { token: app.adminToken, tenantId: app.tenantId };
    expect(
      (
        await publish({
          id: 'release',
          steps: [
            { id: 'build', plugin: 'noop', with: { output: { v: 1 } } },
            { id: 'review', plugin: 'approval', dependsOn: ['build'], with: { message: 'ship it?' } },
            { id: 'ship', plugin: 'noop', dependsOn: [{ step: 'review', status: 'approved' }] },
            { id: 'undo', plugin: 'noop', dependsOn: [{ step: 'review', status: 'rejected' }] },
          ],
        })
      ).status,
    ).toBe(201);
  });
  afterAll(async () => app?.close());

  it('waits holding no slot and no lease, then follows the decision; the ledger records who and why', async () => {
    const runId = await start('release');
    await waitFor(runId, 'review', 'waiting');
    const held = await app.ordo.database.withSystem(
      async (tx) =>
        (await sql<{ n: number }>`select count(*)::int as n from queue_item where run_id = ${runId}`.execute(tx))
          .rows[0].n,
    );
    expect(held).toBe(0);

    const d = await decide(runId, 'review', { decision: 'approved', comment: 'looks good' });
    expect(d.status).toBe(200);
    expect(d.body).toMatchObject({ runId, stepId: 'review', decision: 'approved' });
    const done = (await waitForRun(app, as, runId)) as { status: string; steps: Step[] };
    expect(done.status).toBe('succeeded');
    expect(step(done, 'review')).toMatchObject({
      status: 'succeeded',
      namedStatus: 'approved',
      outputs: { decision: 'approved', comment: 'looks good', decidedBy: d.body.decidedBy },
    });
    expect([step(done, 'ship').status, step(done, 'undo').status]).toEqual(['succeeded', 'skipped']);

    const ev = await events(runId);
    expect(ev.find((e) => e.type === 'step.waiting')?.data).toEqual({ kind: 'approval' });
    const decided = ev.find((e) => e.type === 'step.decided')!;
    expect(decided).toMatchObject({ stepId: 'review', actor: d.body.decidedBy });
    expect(decided.data).toEqual({ decision: 'approved', comment: 'looks good', decidedBy: d.body.decidedBy });
    const types = ev.map((e) => e.type);
    expect(types.indexOf('step.decided')).toBeLessThan(types.lastIndexOf('step.succeeded'));
    expect(verifyChain(chainOf(ev, as.tenantId, runId))).toEqual({ ok: true });

    // Decided already: a second decision changes nothing.
    const again = await decide(runId, 'review', { decision: 'rejected' });
    expect(again.status).toBe(409);
    expect(again.body.error.code).toBe('STEP_NOT_WAITING');
  });

  it('takes the other branch on a rejection', async () => {
    const runId = await start('release');
    await waitFor(runId, 'review', 'waiting');
    expect((await decide(runId, 'review', { decision: 'rejected' })).status).toBe(200);
    const done = (await waitForRun(app, as, runId)) as { status: string; steps: Step[] };
    expect([step(done, 'ship').status, step(done, 'undo').status]).toEqual(['skipped', 'succeeded']);
  });

  it('refuses bad decisions with clear codes and changes nothing', async () => {
    const runId = await start('release');
    await waitFor(runId, 'review', 'waiting');
    const bad = await decide(runId, 'review', { decision: 'maybe' });
    expect(bad.status).toBe(400);
    expect((await decide(runId, 'build', { decision: 'approved' })).body.error.code).toBe('STEP_NOT_APPROVAL');
    expect((await decide(runId, 'nope', { decision: 'approved' })).status).toBe(404);
    const reader = { tenantId: as.tenantId, token: await app.token(as.tenantId, ['orchestrator:read']) };
    expect((await decide(runId, 'review', { decision: 'approved' }, reader)).status).toBe(403);
    const other = await app.tenant('approvals-other');
    const cross = await decide(runId, 'review', { decision: 'approved' }, other);
    expect(cross.status).toBe(404);
    expect(cross.body.error.code).toBe('RUN_NOT_FOUND');
    expect(step(await run(runId), 'review').status).toBe('waiting');
    expect((await events(runId)).some((e) => e.type === 'step.decided')).toBe(false);
  });

  it('lets only the named subjects decide when the step names them', async () => {
    expect(
      (
        await publish({
          id: 'restricted',
          steps: [{ id: 'gate', plugin: 'approval', with: { subjects: ['someone-else'] } }],
        })
      ).status,
    ).toBe(201);
    const runId = await start('restricted');
    await waitFor(runId, 'gate', 'waiting');
    const r = await decide(runId, 'gate', { decision: 'approved' });
    expect(r.status).toBe(403);
    expect(r.body.error.code).toBe('DECISION_FORBIDDEN');
  });

  it('applies the default decision at the timeout, or fails the step without one', async () => {
    expect(
      (
        await publish({
          id: 'timed',
          steps: [
            { id: 'dflt', plugin: 'approval', with: { timeout: '300ms', defaultDecision: 'rejected' } },
            { id: 'none', plugin: 'approval', with: { timeout: '300ms' } },
          ],
        })
      ).status,
    ).toBe(201);
    const runId = await start('timed');
    const done = (await waitForRun(app, as, runId, 30_000)) as { status: string; steps: Step[] };
    expect(done.status).toBe('failed');
    expect(step(done, 'dflt')).toMatchObject({ status: 'succeeded', namedStatus: 'rejected' });
    expect(step(done, 'none').error?.code).toBe('APPROVAL_TIMEOUT');
    const ev = await events(runId);
    expect(ev.find((e) => e.type === 'step.decided')).toMatchObject({ actor: 'engine', stepId: 'dflt' });
    expect(ev.find((e) => e.type === 'step.timed_out')).toMatchObject({ stepId: 'none' });
  });

  it('cancels a waiting step with its run, and its open attempt', async () => {
    const runId = await start('release');
    await waitFor(runId, 'review', 'waiting');
    expect((await app.request('POST', `/api/v1/runs/${runId}/cancel`, { as })).status).toBe(200);
    const r = await run(runId);
    expect(r.status).toBe('cancelled');
    expect(step(r, 'review').status).toBe('cancelled');
    const att = await app.request('GET', `/api/v1/runs/${runId}/steps/review/attempts`, { as });
    expect((att.body.items as { status: string }[]).map((a) => a.status)).toEqual(['cancelled']);
    expect((await decide(runId, 'review', { decision: 'approved' })).body.error.code).toBe('STEP_NOT_WAITING');
  });
});
