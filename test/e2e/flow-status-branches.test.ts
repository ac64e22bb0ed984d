import { verifyChain } from '../../src/modules/runs/run-events';
import { startTestApp, type TestApp } from '../support/test-app';
import { chainOf, runEvents, waitForRun } from './runs-support';

type Step = {
  stepId: string;
  status: string;
  reason: string | null;
  namedStatus: string | null;
  error: { code: string; message: string } | null;
};

/** Status branches: a step ends with a named status, its dependents follow the branch they name. */
describe('status branches', () => {
  let app: TestApp;
  let as: { token: string; tenantId: string };
  const publish = (body: unknown) => app.request('POST', '/api/v1/dags', { as, body });
  const run = async (dagId: string, inputs: Record<string, unknown> = {}) => {
    const r = await app.request('POST', '/api/v1/runs', {
      as,
      body: { dagId, inputs, runToken: `${dagId}-${Math.random()}` },
    });
    expect(r.status).toBe(201);
    return (await waitForRun(app, as, r.body.runId as string)) as { runId: string; status: string; steps: Step[] };
  };
  const byId = (r: { steps: Step[] }) => Object.fromEntries(r.steps.map((s) => [s.stepId, s]));
  const review = (decision: string) => ({
    id: 'review',
    plugin: 'noop',
    statuses: ['approved', 'rejected'],
    with: { namedStatus: decision, output: { by: 'ada' } },
  });
  const branches = (decision: string) => ({
    id: `review-${decision}`,
    steps: [
      review(decision),
      { id: 'ship', plugin: 'noop', dependsOn: [{ step: 'review', status: 'approved' }] },
      { id: 'notify', plugin: 'noop', dependsOn: [{ step: 'review', status: 'rejected' }] },
      { id: 'after_ship', plugin: 'noop', dependsOn: ['ship'] },
      { id: 'audit', plugin: 'noop', dependsOn: ['review'], when: 'steps.review.namedStatus == "approved"' },
      { id: 'close', plugin: 'noop', dependsOn: ['after_ship', 'notify'], trigger: 'none_failed_min_one_success' },
    ],
  });

  beforeAll(async () => {
    app = await startTestApp({ ORDO_ROLES: 'api,worker' });
    as = { token: app.adminToken, tenantId: app.tenantId };
    for (const d of ['approved', 'rejected']) expect((await publish(branches(d))).status).toBe(201);
  });
  afterAll(async () => app?.close());

  it('takes the branch of the named status and skips the other', async () => {
    const ok = await run('review-approved');
    expect(ok.status).toBe('succeeded');
    const s = byId(ok);
    expect(s.review.namedStatus).toBe('approved');
    expect([s.ship.status, s.notify.status, s.after_ship.status, s.audit.status, s.close.status]).toEqual([
      'succeeded',
      'skipped',
      'succeeded',
      'succeeded',
      'succeeded',
    ]);
    expect(s.notify.reason).toBe('upstream_skipped');
    const ev = await runEvents(app, as, ok.runId);
    expect(ev.find((e) => e.type === 'step.succeeded' && e.stepId === 'review')?.data).toMatchObject({
      status: 'approved',
    });
    expect(verifyChain(chainOf(ev, as.tenantId, ok.runId))).toEqual({ ok: true });

    const no = byId(await run('review-rejected'));
    expect([no.ship.status, no.notify.status, no.after_ship.status, no.audit.status, no.close.status]).toEqual([
      'skipped',
      'succeeded',
      'skipped',
      'skipped',
      'succeeded',
    ]);
  });

  it('fails a step that ends with a status it does not declare, or with none when it declares some', async () => {
    expect(
      (
        await publish({
          id: 'undeclared',
          steps: [
            { id: 'a', plugin: 'noop', statuses: ['approved'], with: { namedStatus: 'maybe' } },
            { id: 'b', plugin: 'noop', statuses: ['approved'] },
            { id: 'c', plugin: 'noop', with: { namedStatus: 'approved' } },
          ],
        })
      ).status,
    ).toBe(201);
    const r = byId(await run('undeclared'));
    for (const id of ['a', 'b', 'c']) {
      expect(r[id].status).toBe('failed');
      expect(r[id].error?.code).toBe('UNKNOWN_STATUS');
    }
    expect(r.a.error?.message).toContain('"maybe"');
  });

  it('refuses at publish a status the step does not declare, or a status needed of a step that is not a dependency', async () => {
    for (const [steps, text] of [
      [[review('approved'), { id: 'x', plugin: 'noop', dependsOn: [{ step: 'review', status: 'maybe' }] }], 'maybe'],
      [
        [
          { id: 'a', plugin: 'noop' },
          { id: 'x', plugin: 'noop', dependsOn: [{ step: 'a', status: 'ok' }] },
        ],
        'no statuses',
      ],
      [[review('approved'), { id: 'x', plugin: 'noop', onStatus: { review: 'approved' } }], 'not a dependency'],
      [
        [review('approved'), { id: 'x', plugin: 'noop', dependsOn: [{ step: 'review', status: 'Bad!' }] }],
        'lower-case',
      ],
    ] as const) {
      const r = await publish({ id: 'bad-branch', steps });
      expect(r.status).toBe(400);
      expect(r.body.error.code).toBe('DAG_INVALID');
      expect(JSON.stringify(r.body.error)).toContain(text);
    }
  });

  it('gives the same steps, statuses and events on every run of the same DAG', async () => {
    const shape = async (r: { runId: string; steps: Step[] }) => ({
      steps: r.steps.map((x) => [x.stepId, x.status, x.reason, x.namedStatus]).sort(),
      events: (await runEvents(app, as, r.runId)).map((e) => [
        e.type,
        e.stepId,
        e.type === 'step.skipped' ? e.data : null,
      ]),
    });
    const want = await shape(await run('review-rejected'));
    for (let i = 1; i < 20; i++) expect(await shape(await run('review-rejected'))).toEqual(want);
  });

  it('labels status edges in the graph', async () => {
    const g = await app.request('GET', '/api/v1/dags/review-approved/versions/1/graph', { as });
    expect(g.body.edges).toContainEqual({ from: 'review', to: 'ship', status: 'approved' });
    expect(g.body.edges).toContainEqual({ from: 'review', to: 'audit' });
    const dot = await app.request('GET', '/api/v1/dags/review-approved/versions/1/graph?format=dot', { as });
    expect(dot.text).toContain('"review" -> "notify" [label="rejected"];');
  });

  it('exports the named status with the step', async () => {
    const ok = await run('review-approved');
    const ex = await app.request('GET', '/api/v1/export?dagId=review-approved', { as });
    expect(ex.status).toBe(200);
    const lines = ex.text
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { type: string; runId?: string; stepId?: string; namedStatus?: string });
    const mine = lines.filter((l) => l.type === 'step' && l.runId === ok.runId);
    expect(mine.find((l) => l.stepId === 'review')?.namedStatus).toBe('approved');
    expect(mine.find((l) => l.stepId === 'ship')).not.toHaveProperty('namedStatus');
  });
});
