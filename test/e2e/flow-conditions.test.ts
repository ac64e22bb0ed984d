import { verifyChain } from '../../src/modules/runs/run-events';
import { startTestApp, type TestApp } from '../support/test-app';
import { chainOf, runEvents, waitForRun } from './runs-support';

type Step = {
  stepId: string;
  status: string;
  reason: string | null;
  dispatchSeq: number | null;
  error: { code: string } | null;
};

/** Conditions (`when`) and trigger rules, through the API and a worker. */
describe('conditions and trigger rules', () => {
  let app: TestApp;
  let as: { token: string; tenantId: string };
  const publish = (body: unknown) => app.request('POST', '/api/v1/dags', { as, body });
  const run = async (dagId: string, inputs: Record<string, unknown> = {}) => {
    const r = await app.request('POST', '/api/v1/runs', {
      as,
      body: { dagId, inputs, runToken: `${dagId}-${Math.random()}` },
    });
    expect(r.status).toBe(201);
    return (await waitForRun(app, as, r.body.runId as string)) as {
      runId: string;
      status: string;
      steps: Step[];
      outputsHash: string;
    };
  };
  const byId = (r: { steps: Step[] }) => Object.fromEntries(r.steps.map((s) => [s.stepId, s]));
  const events = (runId: string) => runEvents(app, as, runId);

  beforeAll(async () => {
    app = await startTestApp({ ORDO_ROLES: 'api,worker' });
    as = { token: app.adminToken, tenantId: app.tenantId };
    const branch = {
      id: 'branch',
      inputs: { type: 'object', properties: { go: { type: 'boolean' } }, required: ['go'] },
      steps: [
        { id: 'check', plugin: 'noop', with: { output: { go: '${{ inputs.go }}', n: 3 } } },
        {
          id: 'yes',
          plugin: 'noop',
          dependsOn: ['check'],
          when: 'steps.check.outputs.go',
          with: { output: { took: 'yes' } },
        },
        {
          id: 'no',
          plugin: 'noop',
          dependsOn: ['check'],
          when: '!steps.check.outputs.go && steps.check.status == "succeeded"',
        },
        { id: 'after_yes', plugin: 'noop', dependsOn: ['yes'] },
        { id: 'join', plugin: 'noop', dependsOn: ['after_yes', 'no'], trigger: 'none_failed_min_one_success' },
      ],
    };
    expect((await publish(branch)).status).toBe(201);
    const cleanup = {
      id: 'cleanup',
      steps: [
        { id: 'work', plugin: 'noop', with: { fail: true } },
        { id: 'next', plugin: 'noop', dependsOn: ['work'] },
        { id: 'on_failure', plugin: 'noop', dependsOn: ['work'], trigger: 'one_failed' },
        { id: 'on_success', plugin: 'noop', dependsOn: ['work'], trigger: 'all_success' },
        { id: 'finally', plugin: 'noop', dependsOn: ['next', 'on_failure'], trigger: 'all_done' },
      ],
    };
    expect((await publish(cleanup)).status).toBe(201);
  });
  afterAll(async () => app?.close());

  it('runs the branch whose condition holds and skips the other, with its dependents; the join follows its rule', async () => {
    const yes = await run('branch', { go: true });
    expect(yes.status).toBe('succeeded');
    const s = byId(yes);
    expect([s.yes.status, s.no.status, s.after_yes.status, s.join.status]).toEqual([
      'succeeded',
      'skipped',
      'succeeded',
      'succeeded',
    ]);
    expect(s.no.reason).toBe('condition_false');
    const ev = await events(yes.runId);
    expect(verifyChain(chainOf(ev, as.tenantId, yes.runId))).toEqual({ ok: true });
    expect(ev.find((e) => e.type === 'step.skipped' && e.stepId === 'no')?.data).toEqual({
      reason: 'condition_false',
      value: false,
      when: '!steps.check.outputs.go && steps.check.status == "succeeded"',
    });

    const no = await run('branch', { go: false });
    expect(no.status).toBe('succeeded');
    const t = byId(no);
    expect([t.yes.status, t.no.status, t.after_yes.status, t.join.status]).toEqual([
      'skipped',
      'succeeded',
      'skipped',
      'succeeded',
    ]);
    expect([t.yes.reason, t.after_yes.reason]).toEqual(['condition_false', 'upstream_skipped']);
  });

  it('runs a failure handler and a cleanup step after a failure; the run still fails', async () => {
    const r = await run('cleanup');
    expect(r.status).toBe('failed');
    const s = byId(r);
    expect(s.work.status).toBe('failed');
    expect([s.next.status, s.next.reason]).toEqual(['skipped', 'upstream_failed']);
    expect([s.on_success.status, s.on_success.reason]).toEqual(['skipped', 'upstream_failed']);
    expect(s.on_failure.status).toBe('succeeded');
    expect(s.finally.status).toBe('succeeded');
  });

  it('skips a failure handler when nothing failed', async () => {
    expect(
      (
        await publish({
          id: 'handled',
          steps: [
            { id: 'work', plugin: 'noop' },
            { id: 'on_failure', plugin: 'noop', dependsOn: ['work'], trigger: 'one_failed' },
            { id: 'after', plugin: 'noop', dependsOn: ['on_failure'], trigger: 'all_done' },
          ],
        })
      ).status,
    ).toBe(201);
    const r = await run('handled');
    expect(r.status).toBe('succeeded');
    const s = byId(r);
    expect([s.on_failure.status, s.on_failure.reason]).toEqual(['skipped', 'trigger_rule']);
    expect(s.after.status).toBe('succeeded');
  });

  it('fails the step, not the worker, when a condition cannot be evaluated', async () => {
    expect(
      (
        await publish({
          id: 'bad-read',
          steps: [
            { id: 'a', plugin: 'noop', with: { output: {} } },
            { id: 'b', plugin: 'noop', dependsOn: ['a'], when: 'steps.a.outputs.missing > 1' },
          ],
        })
      ).status,
    ).toBe(201);
    const r = await run('bad-read');
    expect(r.status).toBe('failed');
    const b = byId(r).b;
    expect(b.status).toBe('failed');
    expect(b.error?.code).toBe('CONDITION_FAILED');
  });

  it('refuses at publish a condition that does not parse, is not a bool, reads a step that is not a dependency, or an unknown rule', async () => {
    const step = (extra: Record<string, unknown>) => ({
      id: 'x',
      steps: [
        { id: 'a', plugin: 'noop' },
        { id: 'b', plugin: 'noop' },
        { id: 'c', plugin: 'noop', dependsOn: ['a'], ...extra },
      ],
    });
    for (const [extra, text] of [
      [{ when: 'steps.a.outputs.x >' }, 'condition:'],
      [{ when: '1 + 2' }, 'must be a bool expression'],
      [{ when: 'steps.b.status == "succeeded"' }, 'not a dependency of "c"'],
      [{ when: 'steps[inputs.k].status == "failed"' }, 'literal step id'],
      [{ when: 'unknown_var' }, 'condition:'],
      [{ trigger: 'sometimes' }, 'trigger'],
    ] as const) {
      const r = await publish(step(extra));
      expect(r.status).toBe(400);
      expect(r.body.error.code).toBe('DAG_INVALID');
      const details = JSON.stringify(r.body.error.details);
      expect(details).toContain('"step":"c"');
      expect(details + r.body.error.message).toContain(text);
    }
  });

  it('shows conditions and rules in the graph', async () => {
    const g = await app.request('GET', '/api/v1/dags/cleanup/versions/1/graph', { as });
    expect(g.status).toBe(200);
    expect(g.body.nodes.find((n: { id: string }) => n.id === 'finally')).toMatchObject({ trigger: 'all_done' });
    const dot = await app.request('GET', '/api/v1/dags/branch/versions/1/graph?format=dot', { as });
    expect(dot.text).toContain('when steps.check.outputs.go');
  });

  it('gives the same steps, dispatch order, events of each step and outputs hash on every run of the same inputs', async () => {
    // Steps that run at the same time commit their results in the order they finish, so the
    // events compared are each step's own sequence (and the run's), not their interleaving.
    const shape = async (runId: string, r: { steps: Step[]; outputsHash: string }) => {
      const perStep: Record<string, unknown[]> = {};
      for (const e of await events(runId)) {
        (perStep[e.stepId ?? ''] ??= []).push([e.type, e.type === 'step.skipped' ? e.data : null]);
      }
      return {
        steps: r.steps.map((s) => [s.stepId, s.status, s.reason, s.dispatchSeq]).sort(),
        events: perStep,
        outputsHash: r.outputsHash,
      };
    };
    for (const [dag, inputs] of [
      ['branch', { go: false }],
      ['cleanup', {}],
    ] as const) {
      const first = await run(dag, inputs);
      const want = await shape(first.runId, first);
      for (let i = 1; i < 20; i++) {
        const r = await run(dag, inputs);
        expect(await shape(r.runId, r)).toEqual(want);
      }
    }
  });
});
