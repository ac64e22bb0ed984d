import { verifyChain } from '../../src/modules/runs/run-events';
import { startTestApp, type TestApp } from '../support/test-app';
import { chainOf, runEvents, waitForRun } from './runs-support';

type Step = {
  stepId: string;
  status: string;
  reason: string | null;
  attempts: number;
  dispatchSeq: number | null;
  error: { code: string; message: string; retryable: boolean; class?: string; input?: string } | null;
};
type Run = { runId: string; status: string; outputsHash: string | null; steps: Step[] };

/** Error classes (transient, permanent, invalid_input) and failRun. */
describe('error classes and failRun', () => {
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
  const finished = async (runId: string) => (await waitForRun(app, as, runId)) as Run;
  const step = (r: Run, id: string) => r.steps.find((s) => s.stepId === id)!;
  const events = (runId: string) => runEvents(app, as, runId);
  const retry = { maxRetries: 2, initialDelay: 10, multiplier: 1, maxDelay: 10 };
  const fails = (errorClass: string, extra: Record<string, unknown> = {}) => ({
    plugin: 'noop',
    retry,
    with: { fail: true, errorClass, ...extra },
  });

  beforeAll(async () => {
    app = await startTestApp({ ORDO_ROLES: 'api,worker' });
    as = { token: app.adminToken, tenantId: app.tenantId };
    for (const dag of [
      { id: 'transient', steps: [{ id: 'a', ...fails('transient') }] },
      { id: 'permanent', steps: [{ id: 'a', ...fails('permanent') }] },
      {
        id: 'fail-run',
        steps: [
          { id: 'slow', plugin: 'noop', with: { sleepMs: 5000 } },
          { id: 'after-slow', plugin: 'noop', dependsOn: ['slow'] },
          { id: 'bad', ...fails('permanent'), failRun: true },
        ],
      },
      {
        id: 'no-fail-run',
        steps: [
          { id: 'side', plugin: 'noop', with: { sleepMs: 300 } },
          { id: 'bad', ...fails('permanent') },
        ],
      },
      {
        id: 'invalid',
        inputs: { type: 'object', properties: { n: {} } },
        steps: [
          { id: 'slow', plugin: 'noop', with: { sleepMs: 5000 } },
          {
            id: 'use',
            plugin: 'http',
            retry,
            egress: ['127.0.0.1:9'],
            with: { url: 'http://127.0.0.1:9/', timeoutMs: '${{ inputs.n }}' },
          },
        ],
      },
      {
        id: 'unresolved',
        steps: [
          { id: 'side', plugin: 'noop', with: { sleepMs: 5000 } },
          { id: 'use', plugin: 'noop', retry, with: { output: { v: '${{ inputs.missing.deep }}' } } },
        ],
      },
    ])
      expect([dag.id, (await publish(dag)).body]).toEqual([dag.id, expect.objectContaining({ version: 1 })]);
  });
  afterAll(async () => app?.close());

  it('retries a transient error with backoff and fails the step once its retries are spent', async () => {
    const r = await finished(await start('transient'));
    expect(r.status).toBe('failed');
    expect(step(r, 'a')).toMatchObject({ status: 'failed', attempts: 3 });
    expect((await events(r.runId)).filter((e) => e.type === 'step.retrying')).toHaveLength(2);
  });

  it('does not retry a permanent error, whatever the retry policy', async () => {
    const r = await finished(await start('permanent'));
    expect(step(r, 'a')).toMatchObject({ status: 'failed', attempts: 1 });
    const failed = (await events(r.runId)).find((e) => e.type === 'step.failed');
    // A permanent error's class is what retryable=false says: its event reads as before.
    expect(failed?.data).toEqual({ error: { code: 'NOOP_FAIL', message: 'told to fail', retryable: false } });
  });

  it('fails the whole run at once when a failRun step fails permanently: the other branches are cancelled', async () => {
    const r = await finished(await start('fail-run'));
    expect(r.status).toBe('failed');
    expect(step(r, 'bad')).toMatchObject({ status: 'failed', attempts: 1 });
    expect([step(r, 'slow').status, step(r, 'slow').reason]).toEqual(['cancelled', 'run_failed']);
    expect([step(r, 'after-slow').status, step(r, 'after-slow').reason]).toEqual(['cancelled', 'run_failed']);
    const ev = await events(r.runId);
    expect(ev.filter((e) => e.type === 'step.cancelled').map((e) => [e.stepId, e.data])).toEqual([
      ['slow', { from: 'running', reason: 'run_failed' }],
      ['after-slow', { from: 'pending', reason: 'run_failed' }],
    ]);
    expect(ev.find((e) => e.type === 'run.failed')?.data).toMatchObject({ failedBy: 'bad' });
    expect(verifyChain(chainOf(ev, as.tenantId, r.runId))).toEqual({ ok: true });
  });

  it('lets the other branches finish when the failing step has no failRun', async () => {
    const r = await finished(await start('no-fail-run'));
    expect(r.status).toBe('failed');
    expect(step(r, 'side').status).toBe('succeeded');
    const ev = await events(r.runId);
    expect(ev.find((e) => e.type === 'run.failed')?.data).not.toHaveProperty('failedBy');
  });

  it('fails the run at once, without retry, on invalid input, naming the input', async () => {
    const r = await finished(await start('invalid', { n: 'many' }));
    expect(r.status).toBe('failed');
    expect(step(r, 'use')).toMatchObject({ status: 'failed', attempts: 1 });
    expect(step(r, 'use').error).toMatchObject({
      code: 'INVALID_CONFIG',
      class: 'invalid_input',
      input: 'with.timeoutMs',
      retryable: false,
    });
    expect([step(r, 'slow').status, step(r, 'slow').reason]).toEqual(['cancelled', 'run_failed']);
    const ev = await events(r.runId);
    expect(ev.find((e) => e.type === 'step.failed')?.data).toMatchObject({
      error: { class: 'invalid_input', code: 'INVALID_CONFIG', input: 'with.timeoutMs', retryable: false },
    });
    expect(verifyChain(chainOf(ev, as.tenantId, r.runId))).toEqual({ ok: true });
  });

  it('classes a template reference the run cannot fill as invalid input', async () => {
    const r = await finished(await start('unresolved'));
    expect(r.status).toBe('failed');
    expect(step(r, 'use').error).toMatchObject({ code: 'TEMPLATE_UNRESOLVED', class: 'invalid_input' });
    expect(step(r, 'use').error?.input).toContain('inputs.missing');
    expect(step(r, 'side').status).toBe('cancelled');
  });

  it('refuses a failRun or onFailure that is not what the format allows', async () => {
    for (const body of [
      { id: 'x', steps: [{ id: 'a', plugin: 'noop', failRun: 'yes' }] },
      { id: 'x', onFailure: 'retry', steps: [{ id: 'a', plugin: 'noop' }] },
    ]) {
      const r = await publish(body);
      expect(r.status).toBe(400);
      expect(r.body.error.code).toBe('DAG_INVALID');
    }
  });

  it('gives the same steps, events and hashes on every run of a DAG whose step fails', async () => {
    const shape = async (r: Run) => ({
      steps: r.steps.map((s) => [s.stepId, s.status, s.reason, s.attempts, s.dispatchSeq, s.error]).sort(),
      // (run.created carries the run's own token and trace id.)
      events: (await events(r.runId)).map((e) => [
        e.type,
        e.stepId,
        e.attempt,
        e.type === 'run.created' ? null : e.data,
      ]),
      outputsHash: r.outputsHash,
    });
    for (const [dag, inputs] of [
      ['fail-run', {}],
      ['invalid', { n: 'many' }],
    ] as const) {
      const want = await shape(await finished(await start(dag, inputs)));
      for (let i = 1; i < 20; i++) expect(await shape(await finished(await start(dag, inputs)))).toEqual(want);
    }
  });
});
