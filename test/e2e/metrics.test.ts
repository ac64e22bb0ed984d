import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pino from 'pino';
import { loadConfig } from '../../src/core/config/config';
import { startOrdo } from '../../src/ordo';
import { randomUUID } from 'node:crypto';
import {
  recordDispatch,
  recordRunFinished,
  recordStepFinished,
  recordStepRetry,
} from '../../src/core/telemetry/metrics';
import { startTestApp, type TestApp } from '../support/test-app';
import { itWithTool, PROMTOOL } from '../support/tools';
import { chainDag, publishDag } from './runs-support';

const itWithPromtool = itWithTool(PROMTOOL, 'the Prometheus exposition lint (promtool check metrics)');

describe('/metrics', () => {
  let app: TestApp;
  beforeAll(async () => {
    app = await startTestApp();
  });
  afterAll(async () => app.close());

  it('needs a platform:admin token: 401 without, 403 with a tenant admin token', async () => {
    expect((await app.request('GET', '/metrics')).status).toBe(401);
    const r = await app.request('GET', '/metrics', { as: { token: app.adminToken, tenantId: app.tenantId } });
    expect(r.status).toBe(403);
    expect(r.body.error.code).toBe('INSUFFICIENT_SCOPE');
  });

  it('serves run, step, queue and process metrics in Prometheus text format', async () => {
    const b = await app.tenant('metrics-b');
    recordRunFinished(app.tenantId, 'succeeded', new Date(Date.now() - 2500), new Date());
    recordRunFinished(b.tenantId, 'failed', new Date(Date.now() - 100), new Date());
    recordStepFinished(app.tenantId, 'succeeded', new Date(Date.now() - 30), new Date());
    recordStepRetry(app.tenantId);
    recordDispatch(app.tenantId, new Date(Date.now() - 5), new Date());
    const runId = randomUUID();
    await app.ordo.database.system
      .insertInto('queue_item')
      .values(['a', 'b', 'c'].map((s) => ({ tenant_id: app.tenantId, run_id: runId, step_id: s })))
      .execute();

    const r = await app.request('GET', '/metrics', { as: { token: app.platformToken } });
    expect(r.status).toBe(200);
    expect(r.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/);
    const text = r.text;
    expect(text).toContain(`orchestrator_runs_total{tenant="${app.tenantId}",status="succeeded"} 1`);
    expect(text).toContain(`orchestrator_runs_total{tenant="${b.tenantId}",status="failed"} 1`);
    expect(text).toMatch(/orchestrator_run_duration_seconds_bucket\{le="5",tenant="default",status="succeeded"\} 1/);
    expect(text).toContain(`orchestrator_queue_depth{tenant="${app.tenantId}"} 3`);
    expect(text).toContain(`orchestrator_step_retries_total{tenant="${app.tenantId}"} 1`);
    expect(text).toContain('orchestrator_step_duration_seconds_count');
    expect(text).toContain('orchestrator_dispatch_latency_seconds_count');
    expect(text).toContain('ordo_process_resident_memory_bytes');
    expect(text).not.toContain(app.adminToken);
  });

  it('counts a run cancelled through the API once the cancellation committed', async () => {
    const c = await app.tenant('metrics-cancel');
    const as = { token: c.token, tenantId: c.tenantId };
    await publishDag(app, c.tenantId, chainDag('waits', 2));
    const created = await app.request('POST', '/api/v1/runs', {
      as,
      body: { dagId: 'waits', inputs: {}, runToken: 'm1' },
    });
    expect(created.status).toBe(201);
    const cancel = await app.request('POST', `/api/v1/runs/${created.body.runId as string}/cancel`, { as });
    expect(cancel.status).toBe(200);
    const r = await app.request('GET', '/metrics', { as: { token: app.platformToken } });
    expect(r.text).toContain(`orchestrator_runs_total{tenant="${c.tenantId}",status="cancelled"} 1`);
  });

  itWithPromtool('passes promtool check metrics', async () => {
    recordRunFinished(app.tenantId, 'cancelled', null, new Date());
    const r = await app.request('GET', '/metrics', { as: { token: app.platformToken } });
    const check = spawnSync('promtool', ['check', 'metrics'], { input: r.text, encoding: 'utf8', timeout: 20_000 });
    expect({ status: check.status, out: check.stdout + check.stderr }).toEqual({ status: 0, out: '' });
  });

  it('is served, and protected, by a worker-only process too', async () => {
    const home = fs.mkdtempSync(path.join(os.tmpdir(), 'ordo-metrics-worker-'));
    const config = loadConfig({
      ORDO_HOME: home,
      ORDO_SIGNING_KEYS_DIR: path.join(app.config.home, 'keys'),
      PORT: '0',
      HOST: '127.0.0.1',
      ORDO_ROLES: 'worker',
      LOG_LEVEL: 'silent',
    });
    const worker = await startOrdo(config, pino({ level: 'silent' }), {
      appUrl: app.testDb.appUrl,
      systemUrl: app.testDb.systemUrl,
      ownerUrl: app.testDb.ownerUrl,
    });
    try {
      expect((await fetch(`${worker.url}/metrics`)).status).toBe(401);
      const tenant = await fetch(`${worker.url}/metrics`, {
        headers: { authorization: `Bearer ${app.adminToken}`, 'x-tenant-id': app.tenantId },
      });
      expect(tenant.status).toBe(403);
      const ok = await fetch(`${worker.url}/metrics`, { headers: { authorization: `Bearer ${app.platformToken}` } });
      expect(ok.status).toBe(200);
      expect(await ok.text()).toContain('# TYPE orchestrator_runs_total counter');
    } finally {
      await worker.close();
      fs.rmSync(home, { recursive: true, force: true });
    }
  });

  it('is described in the OpenAPI document with its scope', async () => {
    const r = await app.request('GET', '/api/v1/openapi.json');
    expect(r.body.paths['/metrics'].get.operationId).toBe('metrics');
  });
});
