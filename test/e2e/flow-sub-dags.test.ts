import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { verifyChain } from '../../src/modules/runs/run-events';
import { JWS_FILE, KEY_FILE, MANIFEST_FILE, NDJSON_FILE } from '../../src/modules/export/export-format';
import { verifyExport } from '../../src/modules/export/export-verify';
import { startTestApp, type TestApp } from '../support/test-app';
import { chainOf, runEvents, waitForRun } from './runs-support';

type Step = {
  stepId: string;
  status: string;
  dispatchSeq: number | null;
  outputs: Record<string, unknown> | null;
  error: { code: string; message: string } | null;
  childRunId?: string;
};
type Run = {
  runId: string;
  status: string;
  outputsHash: string | null;
  parentRunId: string | null;
  parentStepId: string | null;
  depth: number;
  steps: Step[];
};

/** `dag` steps: a child run of another DAG of the tenant, waited for, its outputs the step's. */
describe('sub-DAG steps', () => {
  let app: TestApp;
  let as: { token: string; tenantId: string };
  const publish = (body: unknown, who = as) => app.request('POST', '/api/v1/dags', { as: who, body });
  const start = async (dagId: string, inputs: Record<string, unknown> = {}, who = as) => {
    const r = await app.request('POST', '/api/v1/runs', {
      as: who,
      body: { dagId, inputs, runToken: `${dagId}-${Math.random()}` },
    });
    expect(r.status).toBe(201);
    return r.body.runId as string;
  };
  const get = async (runId: string, who = as) =>
    (await app.request('GET', `/api/v1/runs/${runId}`, { as: who })).body as Run;
  const finished = async (runId: string) => (await waitForRun(app, as, runId)) as Run;
  const step = (r: Run, id: string) => r.steps.find((s) => s.stepId === id)!;
  const until = async (check: () => Promise<boolean>, what: string) => {
    for (let i = 0; i < 800; i++) {
      if (await check()) return;
      await new Promise((r) => setTimeout(r, 25));
    }
    throw new Error(`${what} never happened`);
  };
  const published = async (body: unknown) => {
    const r = await publish(body);
    expect([200, 201]).toContain(r.status);
    return r.body.version as number;
  };

  beforeAll(async () => {
    app = await startTestApp({ ORDO_ROLES: 'api,worker,scheduler', ORDO_SUBDAG_MAX_DEPTH: '2' });
    as = { token: app.adminToken, tenantId: app.tenantId };
    await published({
      id: 'child',
      inputs: { type: 'object', properties: { n: { type: 'integer' } }, required: ['n'] },
      steps: [
        { id: 'a', plugin: 'noop', with: { output: { n: '${{ inputs.n }}' } } },
        { id: 'b', plugin: 'noop', dependsOn: ['a'], with: { output: { twice: '${{ steps.a.outputs.n }}' } } },
      ],
    });
    await published({
      id: 'parent',
      inputs: { type: 'object', properties: { n: { type: 'integer' } } },
      steps: [
        { id: 'prep', plugin: 'noop', with: { output: { n: 7 } } },
        {
          id: 'sub',
          plugin: 'dag',
          dependsOn: ['prep'],
          with: { dag: 'child', inputs: { n: '${{ steps.prep.outputs.n }}' } },
        },
        {
          id: 'use',
          plugin: 'noop',
          dependsOn: ['sub'],
          with: { output: { got: '${{ steps.sub.outputs.steps.b.twice }}' } },
        },
      ],
    });
    await published({ id: 'slow', steps: [{ id: 'wait', plugin: 'noop', with: { sleepMs: 60_000 } }] });
    await published({ id: 'broken', steps: [{ id: 'x', plugin: 'noop', with: { fail: true } }] });
  });
  afterAll(async () => app?.close());

  it('runs the child, waits holding nothing, and exposes its outputs; both runs name each other', async () => {
    const runId = await start('parent');
    const done = await finished(runId);
    expect(done.status).toBe('succeeded');
    const sub = step(done, 'sub');
    expect(sub.status).toBe('succeeded');
    expect(sub.childRunId).toBeDefined();
    expect(sub.outputs).toMatchObject({
      dagId: 'child',
      version: 1,
      steps: { b: { twice: 7 } },
    });
    expect(step(done, 'use').outputs).toEqual({ got: 7 });
    expect(done).toMatchObject({ parentRunId: null, parentStepId: null, depth: 0 });

    const child = await get(sub.childRunId!);
    expect(child).toMatchObject({ status: 'succeeded', parentRunId: runId, parentStepId: 'sub', depth: 1 });
    expect(sub.outputs!.outputsHash).toBe(child.outputsHash);

    const pe = await runEvents(app, as, runId);
    const waiting = pe.find((e) => e.type === 'step.waiting' && e.stepId === 'sub')!;
    expect(waiting.data).toMatchObject({ kind: 'dag', dag: 'child', version: 1, childRunId: sub.childRunId });
    expect(pe.find((e) => e.type === 'step.child_ended')?.data).toEqual({
      childRunId: sub.childRunId,
      status: 'succeeded',
      outputsHash: child.outputsHash,
    });
    const ce = await runEvents(app, as, sub.childRunId!);
    expect(ce[0]).toMatchObject({ type: 'run.created', data: { parentRunId: runId, parentStepId: 'sub' } });
    expect(verifyChain(chainOf(pe, as.tenantId, runId)).ok).toBe(true);
    expect(verifyChain(chainOf(ce, as.tenantId, sub.childRunId!)).ok).toBe(true);
  });

  it('pins `latest` at publish: a newer child version does not change what the published parent runs', async () => {
    const before = await get(await start('parent'));
    await published({ id: 'child', steps: [{ id: 'other', plugin: 'noop' }] });
    const version = await app.request('GET', '/api/v1/dags/parent/versions/1', { as });
    expect(version.body.definition.steps[1].with).toMatchObject({ dag: 'child', version: 1 });
    const done = await finished(before.runId);
    expect(step(done, 'sub').outputs).toMatchObject({ version: 1 });
    const again = await finished(await start('parent'));
    expect(step(again, 'sub').outputs).toMatchObject({ version: 1 });
  });

  it('fails the step with CHILD_RUN_FAILED naming the child when the child fails', async () => {
    await published({ id: 'runs-broken', steps: [{ id: 'sub', plugin: 'dag', with: { dag: 'broken' } }] });
    const done = await finished(await start('runs-broken'));
    expect(done.status).toBe('failed');
    const sub = step(done, 'sub');
    expect(sub.error?.code).toBe('CHILD_RUN_FAILED');
    expect(sub.error?.message).toContain(sub.childRunId);
  });

  it('fails the step cleanly when the inputs do not match the child DAG input schema', async () => {
    await published({
      id: 'bad-inputs',
      steps: [{ id: 'sub', plugin: 'dag', with: { dag: 'child', version: 1, inputs: { n: 'seven' } } }],
    });
    const done = await finished(await start('bad-inputs'));
    expect(done.status).toBe('failed');
    expect(step(done, 'sub').error?.code).toBe('CHILD_INPUTS_INVALID');
    expect(step(done, 'sub').childRunId).toBeUndefined();
  });

  it('cancels the child (and its children) with the parent', async () => {
    await published({ id: 'mid', steps: [{ id: 'inner', plugin: 'dag', with: { dag: 'slow' } }] });
    await published({ id: 'top', steps: [{ id: 'outer', plugin: 'dag', with: { dag: 'mid' } }] });
    const runId = await start('top');
    let midId = '';
    let slowId = '';
    await until(async () => {
      midId = step(await get(runId), 'outer').childRunId ?? '';
      slowId = midId ? (step(await get(midId), 'inner').childRunId ?? '') : '';
      return slowId !== '' && step(await get(slowId), 'wait').status === 'running';
    }, 'the grandchild running');
    const c = await app.request('POST', `/api/v1/runs/${runId}/cancel`, { as });
    expect(c.status).toBe(200);
    expect((await get(midId)).status).toBe('cancelled');
    expect((await get(slowId)).status).toBe('cancelled');
    const ev = await runEvents(app, as, midId);
    expect(ev.some((e) => e.type === 'run.cancelled')).toBe(true);
  });

  it('fails the parent step when its child is cancelled on its own', async () => {
    await published({ id: 'runs-slow', steps: [{ id: 'sub', plugin: 'dag', with: { dag: 'slow' } }] });
    const runId = await start('runs-slow');
    let childId = '';
    await until(async () => {
      const s = step(await get(runId), 'sub');
      childId = s.childRunId ?? '';
      return s.status === 'waiting' && childId !== '';
    }, 'the parent waiting');
    expect((await app.request('POST', `/api/v1/runs/${childId}/cancel`, { as })).status).toBe(200);
    const done = await finished(runId);
    expect(done.status).toBe('failed');
    expect(step(done, 'sub').error?.code).toBe('CHILD_RUN_FAILED');
  });

  it('fails a step whose child would be deeper than the limit', async () => {
    await published({ id: 'd2', steps: [{ id: 'leaf', plugin: 'dag', with: { dag: 'broken' } }] });
    await published({ id: 'd1', steps: [{ id: 'down', plugin: 'dag', with: { dag: 'd2' } }] });
    await published({ id: 'd0', steps: [{ id: 'down', plugin: 'dag', with: { dag: 'd1' } }] });
    const done = await finished(await start('d0'));
    expect(done.status).toBe('failed');
    const d1 = await get(step(done, 'down').childRunId!);
    const d2 = await get(step(d1, 'down').childRunId!);
    expect(d2.depth).toBe(2);
    expect(step(d2, 'leaf').error?.code).toBe('SUBDAG_DEPTH_EXCEEDED');
  });

  it('refuses at publish an unknown DAG or version, a template as the DAG, and a cycle', async () => {
    const cases: [unknown, string][] = [
      [{ id: 'x1', steps: [{ id: 's', plugin: 'dag', with: { dag: 'nope' } }] }, 'DAG nope has no active version'],
      [{ id: 'x2', steps: [{ id: 's', plugin: 'dag', with: { dag: 'child', version: 99 } }] }, 'no version 99'],
      [{ id: 'x3', steps: [{ id: 's', plugin: 'dag', with: { dag: '${{ inputs.d }}' } }] }, 's'],
      [{ id: 'mid', steps: [{ id: 'loop', plugin: 'dag', with: { dag: 'top' } }] }, 'cycle: mid -> top@1 -> mid@1'],
      [{ id: 'child', steps: [{ id: 'self', plugin: 'dag', with: { dag: 'child' } }] }, 'cycle'],
    ];
    for (const [body, text] of cases) {
      const r = await publish(body);
      expect(r.status).toBe(400);
      expect(r.body.error.code).toBe('DAG_INVALID');
      expect(r.body.error.message).toContain(text);
    }
  });

  it("never starts another tenant's DAG: refused at publish, even with the same name", async () => {
    const other = await app.tenant('subdags-other');
    const own = await publish({ id: 'their-child', steps: [{ id: 'z', plugin: 'noop' }] }, other);
    expect(own.status).toBe(201);
    const r = await publish({ id: 'steal', steps: [{ id: 's', plugin: 'dag', with: { dag: 'their-child' } }] });
    expect(r.status).toBe(400);
    expect(r.body.error.code).toBe('DAG_INVALID');
    // The other tenant's own `child` does not exist: its dag step cannot name this tenant's.
    const r2 = await publish({ id: 'steal', steps: [{ id: 's', plugin: 'dag', with: { dag: 'child' } }] }, other);
    expect(r2.status).toBe(400);
    // Nor read this tenant's child runs.
    const done = await finished(await start('parent'));
    expect((await app.request('GET', `/api/v1/runs/${step(done, 'sub').childRunId}`, { as: other })).status).toBe(404);
  });

  it('shows the child DAG on the graph node (JSON and DOT)', async () => {
    const g = await app.request('GET', '/api/v1/dags/parent/versions/1/graph', { as });
    expect(g.body.nodes).toContainEqual({
      id: 'sub',
      plugin: 'dag',
      disabled: false,
      subDag: { dag: 'child', version: 1 },
    });
    const dot = await app.request('GET', '/api/v1/dags/parent/versions/1/graph?format=dot', { as });
    expect(dot.text).toContain('runs child v1');
  });

  it('exports both runs with their link, and the export verifies', async () => {
    const done = await finished(await start('parent'));
    const childId = step(done, 'sub').childRunId!;
    const r = await app.request('GET', '/api/v1/export', { as });
    expect(r.status).toBe(200);
    const lines = r.text.split('\n').filter(Boolean);
    const last = JSON.parse(lines.pop()!) as Record<string, any>;
    const recs = lines.map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(recs.find((l) => l.type === 'run' && l.runId === childId)).toMatchObject({
      parentRunId: done.runId,
      parentStepId: 'sub',
    });
    expect(recs.find((l) => l.type === 'run' && l.runId === done.runId)).not.toHaveProperty('parentRunId');
    expect(recs.some((l) => l.type === 'event' && l.runId === done.runId && l.eventType === 'step.child_ended')).toBe(
      true,
    );
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ordo-subdag-'));
    try {
      fs.writeFileSync(path.join(dir, NDJSON_FILE), lines.map((l) => `${l}\n`).join(''));
      fs.writeFileSync(path.join(dir, MANIFEST_FILE), JSON.stringify(last.manifest));
      fs.writeFileSync(path.join(dir, JWS_FILE), last.jws as string);
      fs.writeFileSync(path.join(dir, KEY_FILE), JSON.stringify(last.publicJwk));
      expect(await verifyExport(dir)).toMatchObject({ ok: true });
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('gives the same dispatch order and hashes in parent and child on every run', async () => {
    const shape = async (runId: string) => {
      const p = await finished(runId);
      const c = await get(step(p, 'sub').childRunId!);
      const of = async (r: Run) => ({
        status: r.status,
        outputsHash: r.outputsHash,
        order: r.steps.map((s) => [s.stepId, s.dispatchSeq, s.status]).sort(),
        events: (await runEvents(app, as, r.runId)).map((e) => [e.type, e.stepId]),
      });
      return { parent: await of(p), child: await of(c) };
    };
    const want = await shape(await start('parent', { n: 1 }));
    expect(want.parent.status).toBe('succeeded');
    for (let i = 1; i < 20; i++) expect(await shape(await start('parent', { n: 1 }))).toEqual(want);
  });
});
