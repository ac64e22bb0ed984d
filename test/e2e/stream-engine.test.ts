import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import WebSocket from 'ws';
import { JWS_FILE, KEY_FILE, MANIFEST_FILE, NDJSON_FILE } from '../../src/modules/export/export-format';
import { verifyExport } from '../../src/modules/export/export-verify';
import { ObservabilityService } from '../../src/modules/observability/observability.service';
import { chainDag, publishDag, waitForRun } from './runs-support';
import { startTestApp, type TestApp } from '../support/test-app';

interface Msg {
  type: string;
  [k: string]: any;
}

describe('stream and export over runs executed by the engine', () => {
  let app: TestApp;
  let tmp: string;
  beforeAll(async () => {
    app = await startTestApp({ ORDO_ROLES: 'api,worker' });
    tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'ordo-stream-engine-'));
  });
  afterAll(async () => {
    // The worker's job runner ends its own pool after shutdown; give it a moment before the
    // test database is dropped (a forced drop would fail its still-open connections).
    await app.ordo.close();
    await new Promise((r) => setTimeout(r, 1000));
    await app.close();
    fs.rmSync(tmp, { recursive: true, force: true });
  });

  it('streams a run from start to completion and exports it with a verifiable hash chain', async () => {
    const as = { token: app.adminToken, tenantId: app.tenantId };
    // s02 may reach a host (egress): its plugin call is a span of its own; s01 and s03 reach nothing.
    const pipe = chainDag('pipe', 3);
    pipe.steps[1] = { ...pipe.steps[1], egress: ['example.test'] };
    await publishDag(app, app.tenantId, pipe);
    const ws = new WebSocket(`${app.url.replace('http', 'ws')}/api/v1/stream`, {
      headers: { authorization: `Bearer ${app.adminToken}`, 'x-tenant-id': app.tenantId },
    });
    const messages: Msg[] = [];
    let traceId = '';
    ws.on('message', (d) => messages.push(JSON.parse((d as Buffer).toString('utf8')) as Msg));
    await new Promise<void>((resolve, reject) => {
      ws.once('open', () => resolve());
      ws.once('error', reject);
    });
    try {
      ws.send(JSON.stringify({ type: 'subscribe', id: 'pipe', filter: { dagId: 'pipe' } }));
      const deadline = Date.now() + 10_000;
      while (!messages.some((m) => m.type === 'subscribed')) {
        if (Date.now() > deadline) throw new Error('not subscribed');
        await new Promise((r) => setTimeout(r, 20));
      }
      const created = await app.request('POST', '/api/v1/runs', {
        as,
        body: { dagId: 'pipe', inputs: {}, runToken: 'stream-1' },
      });
      expect(created.status).toBe(201);
      const runId = created.body.runId as string;
      const run = await waitForRun(app, as, runId);
      traceId = run.traceId as string;
      expect(run.status).toBe('succeeded');
      while (!messages.some((m) => m.type === 'event' && m.event === 'run.completed')) {
        if (Date.now() > deadline + 10_000) throw new Error(`no run.completed: ${JSON.stringify(messages)}`);
        await new Promise((r) => setTimeout(r, 20));
      }
      const events = messages.filter((m) => m.type === 'event');
      expect(events.every((e) => e.runId === runId && e.dagId === 'pipe' && e.traceId === run.traceId)).toBe(true);
      expect(events.map((e) => e.seq)).toEqual(events.map((_, i) => i + 1));
      expect(events.filter((e) => e.event === 'step.updated' && e.status === 'succeeded').map((e) => e.stepId)).toEqual(
        ['s01', 's02', 's03'],
      );
      expect(events[events.length - 1]).toMatchObject({ event: 'run.completed', status: 'succeeded' });
    } finally {
      ws.terminate();
    }

    // The engine counted the run and recorded its span once the finishing transaction committed.
    const m = await app.request('GET', '/metrics', { as: { token: app.platformToken } });
    expect(m.text).toMatch(
      new RegExp(`orchestrator_runs_total\\{tenant="${app.tenantId}",status="succeeded"\\} [1-9]`),
    );
    expect(m.text).toMatch(/orchestrator_dispatch_latency_seconds_count\{tenant="default"\} [3-9]/);
    await app.ordo.app.get(ObservabilityService, { strict: false }).flushSpans();

    const r = await app.request('GET', '/api/v1/export?dagId=pipe', { as });
    expect(r.status).toBe(200);
    const lines = r.text.split('\n').filter(Boolean);
    const last = JSON.parse(lines.pop()!) as Record<string, any>;
    const dir = path.join(tmp, 'pipe');
    fs.mkdirSync(dir);
    fs.writeFileSync(path.join(dir, NDJSON_FILE), lines.map((l) => `${l}\n`).join(''));
    fs.writeFileSync(path.join(dir, MANIFEST_FILE), JSON.stringify(last.manifest));
    fs.writeFileSync(path.join(dir, JWS_FILE), last.jws as string);
    fs.writeFileSync(path.join(dir, KEY_FILE), JSON.stringify(last.publicJwk));
    expect(last.manifest.counts).toMatchObject({ run: 1, step: 3, attempt: 3 });
    expect(last.manifest.counts.event).toBeGreaterThan(6);
    expect(await verifyExport(dir)).toMatchObject({ ok: true });
    const runSpan = lines
      .map((l) => JSON.parse(l) as Record<string, any>)
      .find((x) => x.type === 'span' && x.name === 'orchestrator.run');
    expect(runSpan).toMatchObject({ traceId, attributes: { status: 'succeeded', dagId: 'pipe' } });
    // Each attempt ran in an orchestrator.step span whose id is the attempt's stored traceparent,
    // all on the run's trace; the plugin call of the step that may reach a host is its child.
    const records = lines.map((l) => JSON.parse(l) as Record<string, any>);
    const stepSpans = records.filter((x) => x.type === 'span' && x.name === 'orchestrator.step');
    const attempts = records.filter((x) => x.type === 'attempt');
    expect(stepSpans.map((x) => x.spanId).sort()).toEqual(
      attempts.map((a) => (a.traceparent as string).split('-')[2]).sort(),
    );
    for (const sp of stepSpans)
      expect(sp).toMatchObject({ traceId, parentSpanId: runSpan?.spanId, attributes: { status: 'succeeded' } });
    const pluginSpans = records.filter((x) => x.type === 'span' && x.name === 'orchestrator.plugin');
    expect(pluginSpans.map((x) => x.parentSpanId)).toEqual(
      stepSpans.filter((x) => x.attributes.stepId === 's02').map((x) => x.spanId),
    );
  });
});
