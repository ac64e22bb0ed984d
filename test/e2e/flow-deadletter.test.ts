import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { JWS_FILE, KEY_FILE, MANIFEST_FILE, NDJSON_FILE } from '../../src/modules/export/export-format';
import { verifyExport } from '../../src/modules/export/export-verify';
import { verifyChain } from '../../src/modules/runs/run-events';
import { startTestApp, type TestApp } from '../support/test-app';
import { chainOf, runEvents, waitForRun } from './runs-support';

type Run = { runId: string; status: string; rerunOf: string | null; rerunFromStep: string | null; steps: Step[] };
type Step = { stepId: string; status: string; fromRerun: boolean };

/** The tenant's dead-letter: failed runs of DAGs with onFailure: deadletter; inspect, requeue, discard. */
describe('dead-letter', () => {
  let app: TestApp;
  let as: { token: string; tenantId: string };
  let tmp: string;
  const req = (method: string, url: string, body?: unknown, who = as) => app.request(method, url, { as: who, body });
  const start = async (dagId: string, inputs: unknown = {}) => {
    const r = await req('POST', '/api/v1/runs', { dagId, inputs, runToken: `${dagId}-${Math.random()}` });
    expect(r.status).toBe(201);
    return r.body.runId as string;
  };
  const finished = async (runId: string, who = as) => (await waitForRun(app, who, runId)) as Run;
  /** Rows of the tables the dead-letter routes write, to show a refused action wrote nothing. */
  const written = async (runId: string) => ({
    entry: await req('GET', `/api/v1/deadletter/${runId}`).then((r) => (r.status === 200 ? r.body : r.status)),
    events: (await runEvents(app, as, runId)).length,
    runs: (await req('GET', '/api/v1/runs?limit=500')).body.items.length,
  });

  beforeAll(async () => {
    app = await startTestApp({ ORDO_ROLES: 'api,worker' });
    as = { token: app.adminToken, tenantId: app.tenantId };
    tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'ordo-dl-'));
    for (const dag of [
      {
        id: 'etl',
        onFailure: 'deadletter',
        inputs: { type: 'object', properties: { fail: { type: 'boolean' } } },
        steps: [
          { id: 'extract', plugin: 'noop', with: { output: { rows: 3 } } },
          {
            id: 'load',
            plugin: 'noop',
            dependsOn: ['extract'],
            retry: { maxRetries: 1, initialDelay: 10, multiplier: 1, maxDelay: 10 },
            with: { fail: '${{ inputs.fail }}', errorClass: 'transient' },
          },
        ],
      },
      { id: 'plain', steps: [{ id: 'a', plugin: 'noop', with: { fail: true } }] },
    ])
      expect([dag.id, (await req('POST', '/api/v1/dags', dag)).status]).toEqual([dag.id, 201]);
  });
  afterAll(async () => {
    await app?.close();
    if (tmp) fs.rmSync(tmp, { recursive: true, force: true });
  });

  it('enters a failed run of a DAG with onFailure: deadletter, after its retries, and shows its failed step', async () => {
    const r = await finished(await start('etl', { fail: true }));
    expect(r.status).toBe('failed');
    const ev = await runEvents(app, as, r.runId);
    expect(ev.slice(-2).map((e) => e.type)).toEqual(['run.failed', 'run.deadlettered']);
    expect(verifyChain(chainOf(ev, as.tenantId, r.runId))).toEqual({ ok: true });
    const list = await req('GET', '/api/v1/deadletter');
    expect(list.status).toBe(200);
    expect(list.body.items.map((i: { runId: string }) => i.runId)).toContain(r.runId);
    const one = await req('GET', `/api/v1/deadletter/${r.runId}`);
    expect(one.status).toBe(200);
    expect(one.body).toMatchObject({ runId: r.runId, dagId: 'etl', version: 1, state: 'open', resolvedBy: null });
    expect(one.body.failedSteps).toEqual([
      {
        stepId: 'load',
        attempts: 2,
        error: { class: 'transient', code: 'NOOP_FAIL', message: 'told to fail', retryable: true },
        attemptErrors: [
          { attempt: 1, status: 'failed', error: expect.objectContaining({ class: 'transient' }) },
          { attempt: 2, status: 'failed', error: expect.objectContaining({ class: 'transient' }) },
        ],
      },
    ]);
  });

  it('leaves out succeeded runs and failed runs of DAGs without onFailure', async () => {
    const ok = await finished(await start('etl', { fail: false }));
    const plain = await finished(await start('plain'));
    expect([ok.status, plain.status]).toEqual(['succeeded', 'failed']);
    for (const id of [ok.runId, plain.runId]) {
      expect((await req('GET', `/api/v1/deadletter/${id}`)).status).toBe(404);
      expect((await runEvents(app, as, id)).map((e) => e.type)).not.toContain('run.deadlettered');
    }
  });

  it('requeues an entry as a rerun from its failed step, recorded with who did it', async () => {
    const failed = await finished(await start('etl', { fail: true }));
    const r = await req('POST', `/api/v1/deadletter/${failed.runId}/requeue`, {});
    expect(r.status).toBe(201);
    expect(r.body).toMatchObject({
      runId: failed.runId,
      state: 'requeued',
      resolvedBy: expect.any(String),
      fromStep: 'load',
    });
    expect(r.body.requeuedRunId).toBe(r.body.newRun.runId);
    const rerun = await finished(r.body.newRun.runId as string);
    expect(rerun).toMatchObject({ rerunOf: failed.runId, rerunFromStep: 'load' });
    expect(rerun.steps.find((s) => s.stepId === 'extract')).toMatchObject({ status: 'succeeded', fromRerun: true });
    // The rerun has the same inputs, so it fails again and is an entry of its own.
    expect((await req('GET', `/api/v1/deadletter/${rerun.runId}`)).body.state).toBe('open');
    const ev = await runEvents(app, as, failed.runId);
    const audit = ev.find((e) => e.type === 'run.deadletter_requeued');
    expect(audit).toMatchObject({ actor: r.body.resolvedBy, data: { newRunId: rerun.runId, fromStep: 'load' } });
    expect(verifyChain(chainOf(ev, as.tenantId, failed.runId))).toEqual({ ok: true });
    expect(
      (await req('GET', '/api/v1/deadletter?state=requeued')).body.items.map((i: { runId: string }) => i.runId),
    ).toContain(failed.runId);
  });

  it('discards an entry, recorded with who did it, and refuses a second action with 409, writing nothing', async () => {
    const failed = await finished(await start('etl', { fail: true }));
    const d = await req('POST', `/api/v1/deadletter/${failed.runId}/discard`);
    expect(d.status).toBe(200);
    expect(d.body).toMatchObject({ state: 'discarded', requeuedRunId: null });
    const ev = await runEvents(app, as, failed.runId);
    expect(ev[ev.length - 1]).toMatchObject({ type: 'run.deadletter_discarded', actor: d.body.resolvedBy });
    const before = await written(failed.runId);
    for (const action of ['requeue', 'discard']) {
      const again = await req(
        'POST',
        `/api/v1/deadletter/${failed.runId}/${action}`,
        action === 'requeue' ? {} : undefined,
      );
      expect([again.status, again.body.error.code]).toEqual([409, 'DEADLETTER_RESOLVED']);
    }
    expect(await written(failed.runId)).toEqual(before);
  });

  it('answers 404 for a run that is not in the dead-letter, writing nothing', async () => {
    const plain = await finished(await start('plain'));
    const before = await written(plain.runId);
    for (const action of ['requeue', 'discard']) {
      const r = await req('POST', `/api/v1/deadletter/${plain.runId}/${action}`, action === 'requeue' ? {} : undefined);
      expect([r.status, r.body.error.code]).toEqual([404, 'DEADLETTER_NOT_FOUND']);
    }
    expect(await written(plain.runId)).toEqual(before);
  });

  it('refuses a requeue from a step the DAG does not have, writing nothing', async () => {
    const failed = await finished(await start('etl', { fail: true }));
    const before = await written(failed.runId);
    const r = await req('POST', `/api/v1/deadletter/${failed.runId}/requeue`, { fromStep: 'nope' });
    expect([r.status, r.body.error.code]).toEqual([404, 'STEP_NOT_FOUND']);
    expect(await written(failed.runId)).toEqual(before);
  });

  it('pages through the list', async () => {
    const ids = new Set<string>();
    let token: string | null = null;
    do {
      const page: { status: number; body: { items: { runId: string }[]; nextPageToken: string | null } } = await req(
        'GET',
        `/api/v1/deadletter?state=open&limit=1${token ? `&pageToken=${encodeURIComponent(token)}` : ''}`,
      );
      expect(page.status).toBe(200);
      expect(page.body.items.length).toBeLessThanOrEqual(1);
      for (const i of page.body.items) ids.add(i.runId);
      token = page.body.nextPageToken;
    } while (token);
    const all = await req('GET', '/api/v1/deadletter?limit=500');
    expect(ids).toEqual(new Set(all.body.items.map((i: { runId: string }) => i.runId)));
    expect(ids.size).toBeGreaterThan(1);
  });

  it('keeps tenants apart: another tenant neither sees nor acts on an entry', async () => {
    const failed = await finished(await start('etl', { fail: true }));
    const other = await app.tenant('deadletter-other');
    const before = await written(failed.runId);
    expect((await req('GET', `/api/v1/deadletter/${failed.runId}`, undefined, other)).status).toBe(404);
    expect((await req('GET', '/api/v1/deadletter', undefined, other)).body.items).toEqual([]);
    for (const action of ['requeue', 'discard'])
      expect(
        (
          await req(
            'POST',
            `/api/v1/deadletter/${failed.runId}/${action}`,
            action === 'requeue' ? {} : undefined,
            other,
          )
        ).status,
      ).toBe(404);
    expect(await written(failed.runId)).toEqual(before);
  });

  it('refuses the actions to a read-only token', async () => {
    const failed = await finished(await start('etl', { fail: true }));
    const reader = { token: await app.token(as.tenantId, ['orchestrator:read']), tenantId: as.tenantId };
    expect((await req('GET', `/api/v1/deadletter/${failed.runId}`, undefined, reader)).status).toBe(200);
    expect((await req('POST', `/api/v1/deadletter/${failed.runId}/discard`, undefined, reader)).status).toBe(403);
  });

  it('carries the dead-letter events in the signed export, which verifies', async () => {
    const failed = await finished(await start('etl', { fail: true }));
    expect((await req('POST', `/api/v1/deadletter/${failed.runId}/discard`)).status).toBe(200);
    const ex = await req('GET', '/api/v1/export?dagId=etl');
    expect(ex.status).toBe(200);
    const lines = ex.text.split('\n').filter(Boolean);
    const last = JSON.parse(lines.pop()!) as Record<string, any>;
    const types = lines
      .map((l) => JSON.parse(l) as { type: string; runId?: string; event?: string; eventType?: string })
      .filter((l) => l.runId === failed.runId)
      .map((l) => JSON.stringify(l));
    expect(types.join('\n')).toContain('run.deadlettered');
    expect(types.join('\n')).toContain('run.deadletter_discarded');
    const dir = path.join(tmp, 'export');
    fs.mkdirSync(dir, { recursive: true });
    fs.writeFileSync(path.join(dir, NDJSON_FILE), lines.map((l) => `${l}\n`).join(''));
    fs.writeFileSync(path.join(dir, MANIFEST_FILE), JSON.stringify(last.manifest));
    fs.writeFileSync(path.join(dir, JWS_FILE), last.jws as string);
    fs.writeFileSync(path.join(dir, KEY_FILE), JSON.stringify(last.publicJwk));
    expect(await verifyExport(dir)).toMatchObject({ ok: true });
  });

  it('gives the same events and hashes on every run that enters the dead-letter', async () => {
    const shape = async (runId: string) =>
      (await runEvents(app, as, runId)).map((e) => [
        e.type,
        e.stepId,
        e.attempt,
        e.type === 'run.created' ? null : e.data,
      ]);
    const want = await shape((await finished(await start('etl', { fail: true }))).runId);
    for (let i = 1; i < 20; i++)
      expect(await shape((await finished(await start('etl', { fail: true }))).runId)).toEqual(want);
  });
});
