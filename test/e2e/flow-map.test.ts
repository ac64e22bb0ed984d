import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { JWS_FILE, KEY_FILE, MANIFEST_FILE, NDJSON_FILE } from '../../src/modules/export/export-format';
import { verifyExport } from '../../src/modules/export/export-verify';
import { verifyChain } from '../../src/modules/runs/run-events';
import { startTestApp, type TestApp } from '../support/test-app';
import { chainOf, runEvents, waitForRun, type ApiEvent } from './runs-support';

type Step = {
  stepId: string;
  status: string;
  reason: string | null;
  dispatchSeq: number | null;
  attempts: number;
  outputs: unknown;
  error: { code: string; message: string } | null;
};
type Run = { runId: string; status: string; steps: Step[]; outputsHash: string };

/** The most instances of `mapStep` running at once, replayed from the run's ledger (in its order). */
function mostRunningAtOnce(events: ApiEvent[], mapStep: string): number {
  const running = new Set<string>();
  let most = 0;
  for (const e of events) {
    if (!e.stepId?.startsWith(`${mapStep}[`)) continue;
    if (e.type === 'step.running') running.add(e.stepId);
    else if (['step.succeeded', 'step.failed', 'step.retrying', 'step.skipped', 'step.orphaned'].includes(e.type))
      running.delete(e.stepId);
    most = Math.max(most, running.size);
  }
  return most;
}

/** Map steps (dynamic fan-out): instances, maxParallel, the ordered join, failures, cancel, determinism. */
describe('map steps', () => {
  let app: TestApp;
  let as: { token: string; tenantId: string };
  const publish = (body: unknown) => app.request('POST', '/api/v1/dags', { as, body });
  const start = async (dagId: string, inputs: Record<string, unknown> = {}) => {
    const r = await app.request('POST', '/api/v1/runs', {
      as,
      body: { dagId, inputs, runToken: `${dagId}-${Math.random()}` },
    });
    expect(r.status).toBe(201);
    return r.body.runId as string;
  };
  const run = async (dagId: string, inputs: Record<string, unknown> = {}) =>
    (await waitForRun(app, as, await start(dagId, inputs))) as unknown as Run;
  const step = (r: { steps: Step[] }, id: string) => r.steps.find((s) => s.stepId === id)!;
  const events = (runId: string) => runEvents(app, as, runId);

  const fanOut = (id: string, extra: Record<string, unknown> = {}, withExtra: Record<string, unknown> = {}) => ({
    id,
    inputs: { type: 'object', properties: { items: {} } },
    steps: [
      { id: 'list', plugin: 'noop', with: { output: { items: '${{ inputs.items }}' } } },
      {
        id: 'resize',
        plugin: 'noop',
        dependsOn: ['list'],
        map: '${{ steps.list.outputs.items }}',
        with: { output: { n: '${{ map.item.n }}', i: '${{ map.index }}', tag: 'r${{ map.index }}' }, ...withExtra },
        ...extra,
      },
      {
        id: 'join',
        plugin: 'noop',
        dependsOn: ['resize'],
        with: { output: { all: '${{ steps.resize.outputs.results }}' } },
      },
    ],
  });
  const items = (n: number) => Array.from({ length: n }, (_, i) => ({ n: i * 10 }));

  beforeAll(async () => {
    app = await startTestApp({ ORDO_ROLES: 'api,worker,scheduler' });
    as = { token: app.adminToken, tenantId: app.tenantId };
    for (const d of [
      fanOut('fan'),
      fanOut('fan2', { maxParallel: 2 }, { sleepMs: 20 }),
      fanOut('fan1', { maxParallel: 1 }),
      fanOut(
        'fanfail',
        { retry: { maxRetries: 1, initialDelay: 10 } },
        { fail: '${{ map.item.fail }}', retryable: true },
      ),
      fanOut('fanslow', { maxParallel: 2 }, { sleepMs: 60_000 }),
      {
        id: 'overinputs',
        inputs: { type: 'object', properties: { xs: {} } },
        steps: [{ id: 'each', plugin: 'noop', map: '${{ inputs.xs }}', with: { output: { x: '${{ map.item }}' } } }],
      },
    ])
      expect((await publish(d)).status).toBe(201);
  });
  afterAll(async () => app?.close());

  it('runs one instance per element and hands the join their outputs in index order', async () => {
    const r = await run('fan', { items: items(12) });
    expect(r.status).toBe('succeeded');
    const instances = r.steps.filter((s) => s.stepId.startsWith('resize['));
    expect(instances.map((s) => s.stepId).sort()).toEqual(Array.from({ length: 12 }, (_, i) => `resize[${i}]`).sort());
    for (const s of instances) expect(s.status).toBe('succeeded');
    const results = Array.from({ length: 12 }, (_, i) => ({ n: i * 10, i, tag: `r${i}` }));
    expect(step(r, 'resize')).toMatchObject({ status: 'succeeded', outputs: { results } });
    expect(step(r, 'join')).toMatchObject({ status: 'succeeded', outputs: { all: results } });
    // Instances are dispatched in index order, after the map step and before the join.
    const seq = (id: string) => step(r, id).dispatchSeq!;
    for (let i = 1; i < 12; i++) expect(seq(`resize[${i}]`)).toBeGreaterThan(seq(`resize[${i - 1}]`));
    expect(seq('resize[0]')).toBeGreaterThan(seq('resize'));
    expect(seq('join')).toBeGreaterThan(seq('resize[11]'));
    const ev = await events(r.runId);
    expect(ev.find((e) => e.type === 'step.waiting' && e.stepId === 'resize')?.data).toEqual({
      kind: 'map',
      count: 12,
    });
    expect(ev.filter((e) => e.type === 'step.succeeded' && e.stepId?.startsWith('resize[')).length).toBe(12);
    expect(ev.find((e) => e.type === 'step.succeeded' && e.stepId === 'resize')?.actor).toBe('engine');
    expect(verifyChain(chainOf(ev, as.tenantId, r.runId))).toMatchObject({ ok: true });
  });

  it('fans out over inputs; an empty list succeeds with no results', async () => {
    // (An instance's outputs past the inline size are stored as an artifact only; the join reads them there.)
    const big = 'a'.repeat(9000);
    const r = await run('overinputs', { xs: [big, 'b'] });
    expect(step(r, 'each')).toMatchObject({ status: 'succeeded', outputs: { results: [{ x: big }, { x: 'b' }] } });
    const empty = await run('fan', { items: [] });
    expect(empty.status).toBe('succeeded');
    expect(step(empty, 'resize').outputs).toEqual({ results: [] });
    expect(step(empty, 'join').outputs).toEqual({ all: [] });
    expect(empty.steps.some((s) => s.stepId.startsWith('resize['))).toBe(false);
  });

  it('never runs more than maxParallel instances at once (from the ledger)', async () => {
    const r = await run('fan2', { items: items(8) });
    expect(r.status).toBe('succeeded');
    const ev = await events(r.runId);
    expect(ev.filter((e) => e.type === 'step.running' && e.stepId?.startsWith('resize[')).length).toBe(8);
    expect(mostRunningAtOnce(ev, 'resize')).toBeGreaterThanOrEqual(1);
    expect(mostRunningAtOnce(ev, 'resize')).toBeLessThanOrEqual(2);
  });

  it('retries an instance on its own; a failed instance fails the map step after the others ended', async () => {
    const list = [
      { n: 1, fail: false },
      { n: 2, fail: true },
      { n: 3, fail: false },
    ];
    const r = await run('fanfail', { items: list });
    expect(r.status).toBe('failed');
    expect(step(r, 'resize[1]')).toMatchObject({ status: 'failed', attempts: 2 });
    expect(step(r, 'resize[0]')).toMatchObject({ status: 'succeeded', attempts: 1 });
    expect(step(r, 'resize[2]')).toMatchObject({ status: 'succeeded', attempts: 1 });
    expect(step(r, 'resize').status).toBe('failed');
    expect(step(r, 'resize').error).toMatchObject({ code: 'MAP_INSTANCE_FAILED' });
    expect(step(r, 'resize').error!.message).toContain('resize[1]');
    expect(step(r, 'join')).toMatchObject({ status: 'skipped', reason: 'upstream_failed' });
    const ev = await events(r.runId);
    expect(ev.filter((e) => e.type === 'step.retrying').map((e) => e.stepId)).toEqual(['resize[1]']);
    const att = await app.request('GET', `/api/v1/runs/${r.runId}/steps/resize[1]/attempts`, { as });
    expect((att.body.items as { status: string }[]).map((a) => a.status)).toEqual(['failed', 'failed']);
  });

  it('fails a map step whose list is not an array or is too long, with no instance', async () => {
    const notArray = await run('fan', { items: { a: 1 } });
    expect(notArray.status).toBe('failed');
    expect(step(notArray, 'resize').error?.code).toBe('MAP_NOT_ARRAY');
    expect(step(notArray, 'join').status).toBe('skipped');
    const tooLarge = await run('fan', { items: Array.from({ length: 10_001 }, () => 0) });
    expect(tooLarge.status).toBe('failed');
    expect(step(tooLarge, 'resize').error?.code).toBe('MAP_TOO_LARGE');
    for (const r of [notArray, tooLarge]) expect(r.steps.some((s) => s.stepId.startsWith('resize['))).toBe(false);
  });

  it('cancels the instances and the waiting map step with the run', async () => {
    const runId = await start('fanslow', { items: items(6) });
    for (let i = 0; ; i++) {
      const r = (await app.request('GET', `/api/v1/runs/${runId}`, { as })).body as Run;
      if (r.steps.filter((s) => s.stepId.startsWith('resize[') && s.status === 'running').length === 2) break;
      if (i > 400) throw new Error('instances never ran');
      await new Promise((res) => setTimeout(res, 25));
    }
    expect((await app.request('POST', `/api/v1/runs/${runId}/cancel`, { as })).status).toBe(200);
    const r = (await waitForRun(app, as, runId)) as unknown as Run;
    expect(r.status).toBe('cancelled');
    expect(step(r, 'resize').status).toBe('cancelled');
    const instances = r.steps.filter((s) => s.stepId.startsWith('resize['));
    expect(instances).toHaveLength(6);
    for (const s of instances) expect(s.status).toBe('cancelled');
    expect(step(r, 'join').status).toBe('cancelled');
  });

  it('refuses at publish a map that reads a step that is not a dependency, and a bad maxParallel', async () => {
    const base = fanOut('badmap');
    for (const [change, text] of [
      [{ map: '${{ steps.join.outputs.x }}' }, 'not a dependency'],
      [{ map: 'items' }, 'one whole template'],
      [{ map: '${{ secrets.X }}' }, 'inputs or an upstream'],
      [{ maxParallel: 0 }, 'maxParallel'],
      [{ maxParallel: 1.5 }, 'maxParallel'],
      [{ concurrency: 2 }, 'maxParallel, not concurrency'],
    ] as const) {
      const d = { ...base, steps: base.steps.map((s) => (s.id === 'resize' ? { ...s, ...change } : s)) };
      const r = await publish(d);
      expect(r.status).toBe(400);
      expect(r.body.error.code).toBe('DAG_INVALID');
      const details = JSON.stringify(r.body.error.details);
      expect(details).toContain('"step":"resize"');
      expect(details + r.body.error.message).toContain(text);
    }
    const plain = { id: 'nomap', steps: [{ id: 'a', plugin: 'noop', with: { output: { x: '${{ map.item }}' } } }] };
    const r = await publish(plain);
    expect(r.status).toBe(400);
    expect(JSON.stringify(r.body.error.details)).toContain('only in a map step');
    const loose = { id: 'nomap', steps: [{ id: 'a', plugin: 'noop', maxParallel: 2 }] };
    expect((await publish(loose)).status).toBe(400);
  });

  it('exports the instances and their events, and the export verifies', async () => {
    const r = await run('fan', { items: items(3) });
    const res = await app.request('GET', '/api/v1/export?dagId=fan', { as });
    expect(res.status).toBe(200);
    const lines = res.text.split('\n').filter(Boolean);
    const last = JSON.parse(lines.pop()!) as { manifest: unknown; jws: string; publicJwk: unknown };
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ordo-map-export-'));
    try {
      fs.writeFileSync(path.join(dir, NDJSON_FILE), lines.map((l) => `${l}\n`).join(''));
      fs.writeFileSync(path.join(dir, MANIFEST_FILE), JSON.stringify(last.manifest));
      fs.writeFileSync(path.join(dir, JWS_FILE), last.jws);
      fs.writeFileSync(path.join(dir, KEY_FILE), JSON.stringify(last.publicJwk));
      expect(await verifyExport(dir)).toMatchObject({ ok: true });
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
    const mine = lines.map((l) => JSON.parse(l) as Record<string, unknown>).filter((l) => l.runId === r.runId);
    const instanceEvents = mine.filter((l) => l.type === 'event' && String(l.stepId).startsWith('resize['));
    expect(instanceEvents.length).toBeGreaterThanOrEqual(9);
    expect(mine.filter((l) => l.type === 'step' && String(l.stepId).startsWith('resize['))).toHaveLength(3);
  });

  it('shows map steps in the graph', async () => {
    const g = await app.request('GET', '/api/v1/dags/fan2/versions/1/graph', { as });
    expect(g.status).toBe(200);
    expect(g.body.nodes.find((n: { id: string }) => n.id === 'resize')).toMatchObject({
      map: '${{ steps.list.outputs.items }}',
      maxParallel: 2,
    });
    const dot = await app.request('GET', '/api/v1/dags/fan2/versions/1/graph?format=dot', { as });
    expect(dot.text).toContain('map: steps.list.outputs.items');
    expect(dot.text).toContain('maxParallel 2');
  });

  it('gives the same dispatch order, events and outputs hash on every run of the same inputs', async () => {
    const shape = async (r: Run) => ({
      steps: r.steps.map((s) => [s.stepId, s.status, s.dispatchSeq]).sort(),
      events: (await events(r.runId)).map((e) => [e.type, e.stepId, e.type === 'step.waiting' ? e.data : null]),
      outputsHash: r.outputsHash,
    });
    const first = await run('fan1', { items: items(5) });
    const want = await shape(first);
    expect(first.status).toBe('succeeded');
    for (let i = 1; i < 20; i++) expect(await shape(await run('fan1', { items: items(5) }))).toEqual(want);
  });
});
