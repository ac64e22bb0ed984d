import fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { startTestApp, type TestApp } from '../support/test-app';
import { waitForRun } from './runs-support';

/**
 * Every DAG under examples/ publishes as written (YAML, with no warning) and runs to success on a
 * real Ordo (api, worker and scheduler roles). The http steps reach a local server standing in for
 * the APIs a user would name; its URL is a run input, and 127.0.0.1 is in the instance's
 * ORDO_EGRESS_ALLOW_PRIVATE (as startTestApp sets it).
 */
const EXAMPLES = path.resolve(__dirname, '../../examples');

type Step = { stepId: string; status: string; attempts: number; outputs: any; error: { code: string } | null };

describe('examples/', () => {
  let app: TestApp;
  let as: { token: string; tenantId: string };
  let server: http.Server;
  let base = '';
  const received: { path: string; headers: http.IncomingHttpHeaders; body: string }[] = [];
  let flakyCalls = 0;

  const route = (req: http.IncomingMessage, body: string, res: http.ServerResponse) => {
    received.push({ path: req.url ?? '', headers: req.headers, body });
    const json = (status: number, v: unknown) => {
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(JSON.stringify(v));
    };
    switch (req.url) {
      case '/orders':
        return json(200, [
          { customer: 'ada', total: 120 },
          { customer: 'bob', total: 5 },
          { customer: 'ada', total: 30 },
          { customer: 'cy', total: 70 },
        ]);
      case '/summary':
        return json(201, { stored: true });
      case '/flaky':
        flakyCalls++;
        // A 5xx, then an answer slower than the request's timeoutMs, then the answer.
        if (flakyCalls === 1) return json(503, { error: 'busy' });
        if (flakyCalls === 2) return void setTimeout(() => json(200, { late: true }), 1_500);
        return json(200, { ok: true, calls: flakyCalls });
      case '/whoami':
        return req.headers.authorization === 'Bearer s3cret-example-token'
          ? json(200, { user: 'example-bot' })
          : json(401, { error: 'unauthorized' });
      default:
        return json(404, {});
    }
  };

  const example = (file: string) => fs.readFileSync(path.join(EXAMPLES, file), 'utf8');
  const publish = async (file: string) => {
    const r = await app.request('POST', '/api/v1/dags', {
      as,
      rawBody: example(file),
      headers: { 'content-type': 'application/yaml' },
    });
    expect({ file, status: r.status, body: r.status === 201 ? r.body.warnings : r.body }).toEqual({
      file,
      status: 201,
      body: [],
    });
    return r.body as { dagId: string; version: number };
  };
  const run = async (dagId: string, inputs: Record<string, unknown>) => {
    const r = await app.request('POST', '/api/v1/runs', {
      as,
      body: { dagId, inputs, runToken: `${dagId}-${Date.now()}` },
    });
    expect(r.status).toBe(201);
    const done = await waitForRun(app, as, r.body.runId as string, 60_000);
    const steps = new Map((done.steps as Step[]).map((s) => [s.stepId, s]));
    const statuses = Object.fromEntries([...steps].map(([id, s]) => [id, s.status]));
    expect({ dagId, status: done.status, statuses }).toEqual({
      dagId,
      status: 'succeeded',
      statuses: Object.fromEntries([...steps.keys()].map((id) => [id, 'succeeded'])),
    });
    return { run: done, steps };
  };

  beforeAll(async () => {
    server = http.createServer((req, res) => {
      let body = '';
      req.on('data', (c: Buffer) => (body += c.toString('utf8')));
      req.on('end', () => route(req, body, res));
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    app = await startTestApp({ ORDO_ROLES: 'api,worker,scheduler' });
    as = { token: app.adminToken, tenantId: app.tenantId };
  });
  afterAll(async () => {
    await app?.close();
    server.closeAllConnections();
    await new Promise((r) => server.close(r));
  });

  it('has a README line for every example file, and a file for every README line', () => {
    const files = fs.readdirSync(EXAMPLES).filter((f) => f !== 'README.md');
    const readme = example('README.md');
    for (const f of files) expect({ f, listed: readme.includes(`](${f})`) }).toEqual({ f, listed: true });
    for (const [, f] of readme.matchAll(/\]\(([^)]+\.(?:yaml|json))\)/g)) expect(files).toContain(f);
  });

  it('etl-orders: extracts over http, transforms in a script, loads the summary over http', async () => {
    await publish('etl-orders.yaml');
    const { steps } = await run('etl-orders', { source: `${base}/orders`, sink: `${base}/summary`, minTotal: 10 });
    const summary = { count: 3, total: 220, byCustomer: { ada: 150, cy: 70 } };
    expect(steps.get('transform')!.outputs).toEqual(summary);
    const posted = received.filter((r) => r.path === '/summary');
    expect(posted.map((p) => JSON.parse(p.body) as unknown)).toEqual([summary]);
    expect(steps.get('load')!.outputs).toMatchObject({ status: 201, body: { stored: true } });
  });

  it('cli-build: packs dist/ with tar in the cli sandbox and records the checksum', async () => {
    await publish('cli-build.yaml');
    const { steps } = await run('cli-build', { version: '1.4.2' });
    const { files, ...record } = steps.get('record')!.outputs as { files: string[]; sha256: string };
    expect(record).toEqual({ version: '1.4.2', sha256: expect.stringMatching(/^[0-9a-f]{64}$/) });
    expect([...files].sort()).toEqual(['dist/', 'dist/README.txt', 'dist/VERSION']);
    expect(steps.get('build')!.outputs.stdout.trim()).toBe(record.sha256);
  });

  it('flaky-api: retries a 5xx and a timed-out request with backoff, then succeeds', async () => {
    await publish('flaky-api.yaml');
    flakyCalls = 0;
    const { run: r, steps } = await run('flaky-api', { url: `${base}/flaky` });
    expect(steps.get('call')!.attempts).toBe(3);
    // The step that succeeded carries no error; its attempts keep theirs.
    expect(steps.get('call')!.error).toBeNull();
    const attempts = await app.request('GET', `/api/v1/runs/${r.runId as string}/steps/call/attempts`, { as });
    expect(attempts.body.items.map((a: { error: { code: string } | null }) => a.error?.code ?? null)).toEqual([
      'HTTP_STATUS',
      'TIMEOUT',
      null,
    ]);
    expect(steps.get('report')!.outputs).toEqual({ answer: { ok: true, calls: 3 } });
  });

  it('nightly-report: runs on its schedule (the example schedule with a cron of every second)', async () => {
    await publish('nightly-report.yaml');
    const schedule = JSON.parse(example('nightly-report.schedule.json')) as Record<string, unknown>;
    const preview = await app.request(
      'GET',
      `/api/v1/schedules/preview?cron=${encodeURIComponent(String(schedule.cron))}&timezone=${encodeURIComponent(
        String(schedule.timezone),
      )}&count=2`,
      { as },
    );
    expect(preview.status).toBe(200);
    const created = await app.request('POST', '/api/v1/schedules', {
      as,
      body: { ...schedule, cron: '* * * * * *' },
    });
    expect(created.status).toBe(201);
    const id = created.body.id as string;
    const deadline = Date.now() + 20_000;
    let runId: string | undefined;
    while (runId === undefined && Date.now() < deadline) {
      const fires = await app.request('GET', `/api/v1/schedules/${id}/fires`, { as });
      runId = (fires.body.items as { runId: string | null }[]).find((f) => f.runId)?.runId ?? undefined;
      if (runId === undefined) await new Promise((r) => setTimeout(r, 200));
    }
    expect((await app.request('DELETE', `/api/v1/schedules/${id}`, { as })).status).toBe(204);
    expect(runId).toBeDefined();
    const done = await waitForRun(app, as, runId!, 30_000);
    expect(done.status).toBe('succeeded');
    expect(done.runToken).toMatch(new RegExp(`^schedule:${id}:`));
    const report = (done.steps as Step[]).find((s) => s.stepId === 'report')!;
    expect(report.outputs).toEqual({ region: 'eu-central', jobs: 3, failed: ['backup'], healthy: false });
  });

  it('secret-api-call: sends a tenant secret as a bearer token, never showing its value', async () => {
    const put = await app.request('PUT', '/api/v1/secrets/API_TOKEN', { as, body: { value: 's3cret-example-token' } });
    expect(put.body).toMatchObject({ name: 'API_TOKEN', created: true });
    await publish('secret-api-call.yaml');
    const { run: r, steps } = await run('secret-api-call', { url: `${base}/whoami` });
    expect(steps.get('whoami')!.outputs).toMatchObject({ status: 200, body: { user: 'example-bot' } });
    const attempts = await app.request('GET', `/api/v1/runs/${r.runId as string}/steps/whoami/attempts`, { as });
    expect(JSON.stringify([r, attempts.body])).not.toContain('s3cret-example-token');
  });

  it('fan-out-join: runs three branches after one step and joins them', async () => {
    await publish('fan-out-join.yaml');
    const { steps } = await run('fan-out-join', { numbers: [4, 8, 15, 16, 23, 42] });
    expect(steps.get('join')!.outputs).toEqual({ n: 6, max: 42, mean: 18 });
    expect(['sum', 'max', 'count'].map((s) => steps.get(s)!.outputs)).toEqual([
      { value: 108 },
      { value: 42 },
      { value: 6 },
    ]);
  });
});
