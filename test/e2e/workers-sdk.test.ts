import type { ChildProcess } from 'node:child_process';
import net from 'node:net';
import { startTestApp, type TestApp } from '../support/test-app';
import { runEvents, waitForRun } from './runs-support';
import {
  mintWorkerToken,
  publishDagJson,
  startChildWorker,
  startRun,
  until,
  type ChildWorker,
  type ChildWorkerOptions,
} from './workers-sdk-support';

type As = { token: string; tenantId: string };
type Step = { stepId: string; status: string; outputs: any; error: { code: string } | null };

/** A queue step of `taskType` in `pool`, retried on a transient failure or a lost worker. */
const queueDag = (id: string, pool: string, taskType: string, inputs: object = {}, strategy?: string) => ({
  id,
  steps: [
    {
      id: 'work',
      plugin: 'queue',
      timeout: '2m',
      retry: { maxRetries: 2, initialDelay: '10ms' },
      with: { taskType, pool, inputs, ...(strategy ? { strategy } : {}) },
    },
  ],
});

/** A port nothing listens on. */
async function deadUrl(): Promise<string> {
  const srv = net.createServer();
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  const port = (srv.address() as net.AddressInfo).port;
  await new Promise((r) => srv.close(r));
  return `http://127.0.0.1:${port}`;
}

/**
 * A TCP proxy to `target` for one worker's connections: a test can swallow what the server sends
 * (an offer lost on the way) and cut the connections (a dropped network).
 */
async function cuttableProxy(target: string) {
  const to = new URL(target);
  const ends = new Set<() => void>();
  let swallow = false;
  const srv = net.createServer((client) => {
    const upstream = net.connect(Number(to.port), to.hostname);
    const end = () => {
      client.destroy();
      upstream.destroy();
      ends.delete(end);
    };
    ends.add(end);
    client.on('data', (d) => upstream.write(d));
    upstream.on('data', (d) => {
      if (!swallow) client.write(d);
    });
    for (const sock of [client, upstream]) {
      sock.on('close', end);
      sock.on('error', end);
    }
  });
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${(srv.address() as net.AddressInfo).port}`,
    swallow: (on: boolean) => (swallow = on),
    cut: () => [...ends].forEach((end) => end()),
    close: () => {
      [...ends].forEach((end) => end());
      return new Promise((r) => srv.close(r));
    },
  };
}

/**
 * SDK workers (sdk/worker) in child processes against a real Ordo (api, worker and scheduler roles)
 * and PostgreSQL: queue steps run on them over the WebSocket channel and by long-poll, a worker
 * killed or paused mid-task loses it to another, tenants and pools stay apart.
 */
describe('SDK workers (child processes)', () => {
  let app: TestApp;
  let as: As;
  const started: ChildProcess[] = [];

  const worker = async (
    pool: string,
    name: string,
    opts: Partial<ChildWorkerOptions> & { who?: As } = {},
  ): Promise<ChildWorker> => {
    const who = opts.who ?? as;
    const token = await mintWorkerToken(app, who, pool, name);
    return startChildWorker({ url: app.url, token, tenantId: who.tenantId, name, pool, ...opts }, started);
  };
  const registered = async (w: ChildWorker) =>
    (await w.waitFor((e) => e.event === 'registered', 'its registration')).workerId as string;
  const steps = async (runId: string, who: As = as) =>
    (await app.request('GET', `/api/v1/runs/${runId}`, { as: who })).body.steps as Step[];
  const attempts = async (runId: string) =>
    (await app.request('GET', `/api/v1/runs/${runId}/steps/work/attempts`, { as })).body.items as { status: string }[];
  const workerStatus = async (workerId: string) =>
    (await app.request('GET', `/api/v1/workers/${workerId}`, { as })).body?.status as string | undefined;

  beforeAll(async () => {
    app = await startTestApp({
      ORDO_ROLES: 'api,worker,scheduler',
      ORDO_EXTERNAL_WORKER_TTL_MS: '2000',
      ORDO_EXTERNAL_WORKER_SWEEP_MS: '200',
    });
    as = { token: app.adminToken, tenantId: app.tenantId };
  });
  afterEach(() => {
    for (const c of started.splice(0)) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
  });
  afterAll(async () => {
    await app?.close();
  });

  it('runs queue steps on workers over WebSocket and by long-poll (after a dead URL), then drains them on SIGTERM', async () => {
    const ws = await worker('mixed', 'mixed-ws', { transport: 'websocket', maxConcurrent: 2 });
    const lp = await worker('mixed', 'mixed-lp', {
      transport: 'long-poll',
      maxConcurrent: 2,
      url: [await deadUrl(), app.url],
    });
    const ids = new Map([
      [await registered(ws), ws],
      [await registered(lp), lp],
    ]);
    await ws.waitFor((e) => e.event === 'transport' && e.kind === 'websocket', 'the channel');
    await publishDagJson(
      app,
      as,
      queueDag('sdk-echo', 'mixed', 'echo', { value: '${{ inputs.value }}' }, 'round_robin'),
    );
    const runs = await Promise.all(
      Array.from({ length: 8 }, (_, i) => startRun(app, as, 'sdk-echo', { value: i }, `echo-${i}`)),
    );
    const byWorker = new Map<string, number>();
    for (const [i, runId] of runs.entries()) {
      expect((await waitForRun(app, as, runId, 60_000)).status).toBe('succeeded');
      const out = (await steps(runId)).find((s) => s.stepId === 'work')!.outputs as { value: number; worker: string };
      expect(out.value).toBe(i);
      byWorker.set(out.worker, (byWorker.get(out.worker) ?? 0) + 1);
    }
    // Round robin gives both workers tasks: one took them over its channel, the other by long-poll.
    expect([...byWorker.keys()].sort()).toEqual(['mixed-lp', 'mixed-ws']);
    for (const w of [ws, lp]) {
      const results = w.events.filter((e) => e.event === 'result');
      expect(results).toHaveLength(byWorker.get(w.name)!);
      for (const r of results) expect(r.answer).toEqual({ outcome: 'succeeded', duplicate: false });
    }
    expect(lp.events.some((e) => e.event === 'transport')).toBe(false);

    // SIGTERM drains: each leaves (offline at once) and exits 0.
    for (const [id, w] of ids) {
      w.signal('SIGTERM');
      expect(await w.exited).toEqual({ code: 0, signal: null });
      expect(w.events.at(-1)!.event).toBe('stopped');
      expect(await workerStatus(id)).toBe('offline');
    }
  });

  it('retries on another worker the task of a worker SIGKILLed mid-task; exactly one attempt succeeds', async () => {
    await publishDagJson(app, as, queueDag('sdk-kill', 'kill', 'sleep', { ms: 10 }));
    const victim = await worker('kill', 'kill-victim', { holdMs: 600_000 });
    await registered(victim);
    const runId = await startRun(app, as, 'sdk-kill', {}, 'kill-1');
    await victim.waitFor((e) => e.event === 'task' && e.runId === runId, 'the task');
    victim.signal('SIGKILL');
    const survivor = await worker('kill', 'kill-survivor', { transport: 'long-poll' });
    const run = await waitForRun(app, as, runId, 60_000);
    expect(run.status).toBe('succeeded');
    expect((await steps(runId))[0].outputs).toEqual({ worker: 'kill-survivor' });
    const all = await attempts(runId);
    expect(all.length).toBeGreaterThanOrEqual(2);
    expect(all.filter((a) => a.status === 'succeeded')).toHaveLength(1);
    const done = await survivor.waitFor((e) => e.event === 'result' && e.runId === runId, 'the result');
    expect(done.answer).toEqual({ outcome: 'succeeded', duplicate: false });
  });

  it('delivers again a task offered on a connection that dropped before the offer arrived; one attempt', async () => {
    await publishDagJson(app, as, queueDag('sdk-lost', 'lost', 'echo', { value: 7 }));
    const proxy = await cuttableProxy(app.url);
    try {
      const w = await worker('lost', 'lost-1', { url: proxy.url });
      await w.waitFor((e) => e.event === 'transport' && e.kind === 'websocket', 'its channel');
      proxy.swallow(true);
      const runId = await startRun(app, as, 'sdk-lost', {}, 'lost-1');
      await until('the task delivered', async () => {
        const r = await app.request('GET', `/api/v1/runs/${runId}`, { as });
        return r.body.steps[0].task?.status === 'delivered' ? true : undefined;
      });
      proxy.cut();
      proxy.swallow(false);
      // The task's deadline is two minutes away: it ends sooner only if it is delivered again.
      expect((await waitForRun(app, as, runId, 60_000)).status).toBe('succeeded');
      expect((await steps(runId))[0].outputs).toEqual({ value: 7, worker: 'lost-1' });
      expect(await attempts(runId)).toEqual([expect.objectContaining({ status: 'succeeded' })]);
      expect(w.events.filter((e) => e.event === 'task' && e.runId === runId)).toHaveLength(1);
    } finally {
      await proxy.close();
    }
  });

  it('refuses the late result of a worker paused (SIGSTOP) past its TTL; it registers again', async () => {
    await publishDagJson(app, as, queueDag('sdk-pause', 'pause', 'block', { ms: 10 }));
    const paused = await worker('pause', 'pause-stopped', { transport: 'long-poll', holdMs: 1_000 });
    const firstId = await registered(paused);
    const runId = await startRun(app, as, 'sdk-pause', {}, 'pause-1');
    await paused.waitFor((e) => e.event === 'task' && e.runId === runId, 'the task');
    paused.signal('SIGSTOP');
    await until('the paused worker offline', async () =>
      (await workerStatus(firstId)) === 'offline' ? true : undefined,
    );
    const survivor = await worker('pause', 'pause-survivor', { transport: 'long-poll' });
    expect((await waitForRun(app, as, runId, 60_000)).status).toBe('succeeded');
    expect((await steps(runId))[0].outputs).toEqual({ worker: 'pause-survivor' });

    paused.signal('SIGCONT');
    const refused = await paused.waitFor((e) => e.event === 'refused' && e.runId === runId, 'the refusal');
    expect(refused.code).toBe('TASK_ORPHANED');
    expect(paused.events.some((e) => e.event === 'result' && e.runId === runId)).toBe(false);
    // Told it is offline, it registers again under a new id.
    const again = await paused.waitFor((e) => e.event === 'registered' && e.workerId !== firstId, 'a new registration');
    expect(await workerStatus(again.workerId as string)).toBe('online');
    expect((await attempts(runId)).filter((a) => a.status === 'succeeded')).toHaveLength(1);
    expect((await runEvents(app, as, runId)).map((e) => e.type)).toContain('step.result_rejected');
    await survivor.waitFor((e) => e.event === 'result' && e.runId === runId, 'the result');
  });

  it.each(['websocket', 'long-poll'] as const)(
    'shows the progress of a task on its step, and aborts it when its run is cancelled (over %s), posting nothing',
    async (transport) => {
      const pool = `cancel-${transport}`;
      await publishDagJson(app, as, queueDag(`sdk-cancel-${transport}`, pool, 'sleep', { ms: 600_000 }));
      const w = await worker(pool, `cancel-${transport}`, { transport });
      await registered(w);
      const runId = await startRun(app, as, `sdk-cancel-${transport}`, {}, `cancel-${transport}-1`);
      const task = await w.waitFor((e) => e.event === 'task' && e.runId === runId, 'the task');
      const shown = await until('the progress on the step', async () => {
        const step = (await app.request('GET', `/api/v1/runs/${runId}`, { as })).body.steps[0] as {
          task?: { progress: { percent: number; message: string } | null };
        };
        return step.task?.progress ?? undefined;
      });
      expect(shown).toMatchObject({ percent: 10, message: 'sleeping' });
      expect((await app.request('POST', `/api/v1/runs/${runId}/cancel`, { as, body: {} })).status).toBeLessThan(300);
      const cancelled = await w.waitFor((e) => e.event === 'cancelled', 'the cancel');
      expect(cancelled.attemptId).toBe(task.attemptId);
      expect((await waitForRun(app, as, runId, 60_000)).status).toBe('cancelled');
      // Aborted, the handler failed; the SDK posted nothing for it, and the worker is free for the next task.
      const next = await startRun(app, as, `sdk-cancel-${transport}`, {}, `cancel-${transport}-2`);
      await w.waitFor((e) => e.event === 'task' && e.runId === next, 'the next task');
      expect(w.events.filter((e) => e.attemptId === task.attemptId).map((e) => e.event)).toEqual(['task', 'cancelled']);
    },
  );

  it('a worker of tenant A never receives a task of tenant B, in a pool of the same name', async () => {
    const b = await app.tenant(`sdk-b-${process.pid}`);
    const dag = queueDag('sdk-iso', 'iso', 'echo', { value: '${{ inputs.value }}' });
    await publishDagJson(app, as, dag);
    await publishDagJson(app, b, dag);
    const wa = await worker('iso', 'iso-a', { maxConcurrent: 4 });
    const wb = await worker('iso', 'iso-b', { who: b, transport: 'long-poll', maxConcurrent: 4 });
    await Promise.all([registered(wa), registered(wb)]);
    const runsA = await Promise.all([0, 1, 2, 3].map((i) => startRun(app, as, 'sdk-iso', { value: i }, `iso-a-${i}`)));
    const runsB = await Promise.all([0, 1, 2, 3].map((i) => startRun(app, b, 'sdk-iso', { value: i }, `iso-b-${i}`)));
    for (const r of runsA) expect((await waitForRun(app, as, r, 60_000)).status).toBe('succeeded');
    for (const r of runsB) expect((await waitForRun(app, b, r, 60_000)).status).toBe('succeeded');
    for (const r of runsA) expect((await steps(r))[0].outputs.worker).toBe('iso-a');
    for (const r of runsB) expect((await steps(r, b))[0].outputs.worker).toBe('iso-b');
    const got = (w: ChildWorker) => w.events.filter((e) => e.event === 'task').map((e) => e.runId as string);
    expect(got(wa).sort()).toEqual([...runsA].sort());
    expect(got(wb).sort()).toEqual([...runsB].sort());
  });

  it('a worker token reaches no tenant route and cannot register in another pool', async () => {
    const token = await mintWorkerToken(app, as, 'locked', 'locked-1');
    const w = { token, tenantId: as.tenantId };
    for (const [method, url, body] of [
      ['GET', '/api/v1/runs', undefined],
      ['GET', '/api/v1/dags', undefined],
      ['GET', '/api/v1/workers', undefined],
      ['POST', '/api/v1/runs', { dagId: 'sdk-echo', runToken: 'x' }],
      ['POST', '/api/v1/tokens', { scopes: ['worker'], pool: 'locked' }],
    ] as const) {
      const r = await app.request(method, url, { as: w, body });
      expect([method, url, r.status]).toEqual([method, url, 403]);
    }
    const elsewhere = startChildWorker(
      { url: app.url, token, tenantId: as.tenantId, name: 'locked-elsewhere', pool: 'gpu' },
      started,
    );
    const failed = await elsewhere.waitFor((e) => e.event === 'failed', 'the refused start');
    expect(failed).toMatchObject({ status: 403 });
    expect(await elsewhere.exited).toEqual({ code: 1, signal: null });
  });

  it('fails the step with CONTRACT_VIOLATION when the worker outputs break its declared schema', async () => {
    await publishDagJson(app, as, queueDag('sdk-contract', 'contract', 'bad-output'));
    const w = await worker('contract', 'contract-1', { taskTypes: ['bad-output'] });
    await registered(w);
    const runId = await startRun(app, as, 'sdk-contract', {}, 'contract-1');
    expect((await waitForRun(app, as, runId, 60_000)).status).toBe('failed');
    expect((await steps(runId))[0].error).toMatchObject({ code: 'CONTRACT_VIOLATION' });
    const answered = await w.waitFor((e) => e.event === 'result' && e.runId === runId, 'the answer');
    expect(answered.status).toBe('succeeded');
    expect(answered.answer).toMatchObject({ outcome: 'failed', error: { code: 'CONTRACT_VIOLATION' } });
    // A violation is not retried.
    expect(await attempts(runId)).toHaveLength(1);
  });
});
