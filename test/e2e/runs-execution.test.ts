import { createHash } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import pg from 'pg';
import { signWebhook } from '../../src/modules/engine/constraints.service';
import { verifyChain, type ChainedEvent } from '../../src/modules/runs/run-events';
import { startTestApp, type TestApp } from '../support/test-app';
import { chainDag, publishDag, waitForRun } from './runs-support';

type Step = {
  stepId: string;
  status: string;
  reason: string | null;
  dispatchSeq: number | null;
  attempts: number;
  outputs: unknown;
  outputsHash: string | null;
  fromRerun: boolean;
  error: { code: string } | null;
};

describe('run execution (api + worker + scheduler roles)', () => {
  let app: TestApp;
  let as: { token: string; tenantId: string };
  const start = async (dagId: string, inputs: Record<string, unknown> = {}, runToken = `${dagId}-${Math.random()}`) => {
    const r = await app.request('POST', '/api/v1/runs', { as, body: { dagId, inputs, runToken } });
    expect(r.status).toBe(201);
    return r.body.runId as string;
  };
  const steps = (run: { steps: Step[] }) => new Map(run.steps.map((s) => [s.stepId, s]));
  const events = async (runId: string) => {
    const r = await app.request('GET', `/api/v1/runs/${runId}/events?limit=1000`, { as });
    return r.body.items as {
      seq: number;
      type: string;
      stepId: string | null;
      attempt: number | null;
      data: any;
      actor: string;
      createdUtc: string;
      prevHash: string;
      hash: string;
    }[];
  };

  beforeAll(async () => {
    app = await startTestApp({
      ORDO_ROLES: 'api,worker,scheduler',
      ORDO_REAPER_INTERVAL_MS: '200',
      ORDO_LEASE_TTL_MS: '2000',
    });
    as = { token: app.adminToken, tenantId: app.tenantId };
  });
  afterAll(async () => app.close());

  it('gives a script step the run inputs and its upstream outputs, and stores what it returns', async () => {
    await publishDag(app, app.tenantId, {
      id: 'scripted',
      steps: [
        { id: 'a', plugin: 'noop', with: { output: { x: '${{ inputs.name }}' } } },
        {
          id: 'b',
          plugin: 'script',
          dependsOn: ['a'],
          with: { code: 'console.log("greeting", inputs.name); return { greeting: "hi " + steps.a.outputs.x };' },
        },
      ],
    });
    const run = await waitForRun(app, as, await start('scripted', { name: 'ada' }));
    expect(steps(run).get('b')!.error).toBeNull();
    expect(run.status).toBe('succeeded');
    expect(steps(run).get('b')!.outputs).toEqual({ greeting: 'hi ada' });
  });

  it('runs a chain, templating inputs and upstream outputs into downstream config', async () => {
    await publishDag(app, app.tenantId, {
      id: 'tpl',
      inputs: { type: 'object', properties: { n: { type: 'integer' } } },
      steps: [
        { id: 'fetch', plugin: 'noop', with: { output: { body: { n: '${{ inputs.n }}', tag: 'v' } } } },
        {
          id: 'use',
          plugin: 'noop',
          dependsOn: ['fetch'],
          with: { output: { got: '${{ steps.fetch.outputs.body }}', s: 'n=${{ inputs.n }}' } },
        },
      ],
    });
    const runId = await start('tpl', { n: 5 });
    const run = await waitForRun(app, as, runId);
    expect(run.status).toBe('succeeded');
    const s = steps(run);
    expect(s.get('use')!.outputs).toEqual({ got: { n: 5, tag: 'v' }, s: 'n=5' });
    expect(s.get('use')!.outputsHash).toBe(
      createHash('sha256').update('{"got":{"n":5,"tag":"v"},"s":"n=5"}').digest('hex'),
    );
    expect(run.outputsHash).toMatch(/^[0-9a-f]{64}$/);
    const art = await app.request('GET', `/api/v1/artifacts/${s.get('use')!.outputsHash}`, { as });
    expect(art.status).toBe(200);
    expect(art.body).toEqual({ got: { n: 5, tag: 'v' }, s: 'n=5' });
    const b = await app.tenant('tenant-art', ['orchestrator:admin']);
    const other = await app.request('GET', `/api/v1/artifacts/${s.get('use')!.outputsHash}`, {
      as: { token: b.token, tenantId: b.tenantId },
    });
    expect(other.status).toBe(404);
    expect((await app.request('GET', '/api/v1/artifacts/XYZ', { as })).status).toBe(400);
    // The event chain of an executed run verifies, and every step went queued → running → succeeded.
    const ev = await events(runId);
    expect(ev.map((e) => e.seq)).toEqual(ev.map((_, i) => i + 1));
    const chained = ev.map((e) => ({
      ...e,
      runId,
      createdAt: e.createdUtc,
      tenantId: app.tenantId,
    })) as unknown as ChainedEvent[];
    expect(verifyChain(chained)).toEqual({ ok: true });
    expect(ev.filter((e) => e.stepId === 'use').map((e) => e.type)).toEqual([
      'step.queued',
      'step.running',
      'step.succeeded',
    ]);
    expect(ev.at(-1)!.type).toBe('run.succeeded');
    // One trace id per run, carried by each attempt's traceparent.
    const at = await app.request('GET', `/api/v1/runs/${runId}/steps/use/attempts`, { as });
    expect(at.body.items).toHaveLength(1);
    expect(at.body.items[0].traceparent).toMatch(new RegExp(`^00-${run.traceId}-[0-9a-f]{16}-01$`));
    const a = at.body.items[0];
    for (const k of ['queuedUtc', 'claimedUtc', 'constraintCheckedUtc', 'startedUtc', 'finishedUtc', 'terminatedUtc'])
      expect(a[k]).not.toBeNull();
  });

  it('injects secrets into step config at call time and keeps their values out of stored outputs', async () => {
    const put = await app.request('PUT', '/api/v1/secrets/API_TOKEN', { as, body: { value: 's3cr3t-value' } });
    expect([200, 201]).toContain(put.status);
    await publishDag(app, app.tenantId, {
      id: 'secretive',
      steps: [{ id: 'use', plugin: 'noop', with: { output: { auth: 'Bearer ${{ secrets.API_TOKEN }}', plain: 'x' } } }],
    });
    const runId = await start('secretive');
    const run = await waitForRun(app, as, runId);
    expect(run.status).toBe('succeeded');
    expect(steps(run).get('use')!.outputs).toEqual({ auth: 'Bearer [redacted]', plain: 'x' });
    const ev = await app.request('GET', `/api/v1/runs/${runId}/events?limit=1000`, { as });
    expect(ev.text).not.toContain('s3cr3t-value');

    await publishDag(app, app.tenantId, {
      id: 'no-secret',
      steps: [{ id: 'use', plugin: 'noop', with: { output: { auth: '${{ secrets.MISSING }}' } } }],
    });
    const failed = await waitForRun(app, as, await start('no-secret'));
    expect(failed.status).toBe('failed');
    expect(steps(failed).get('use')!.error!.code).toBe('SECRET_NOT_FOUND');
  });

  it('dispatches ready steps in topological order with lexical tie-break, the same in every run', async () => {
    await publishDag(app, app.tenantId, {
      id: 'fan',
      steps: [
        { id: 'root', plugin: 'noop' },
        { id: 'zeta', plugin: 'noop', dependsOn: ['root'] },
        { id: 'alpha', plugin: 'noop', dependsOn: ['root'] },
        { id: 'mid', plugin: 'noop', dependsOn: ['root'] },
        { id: 'beta', plugin: 'noop', dependsOn: ['root'] },
        { id: 'join', plugin: 'noop', dependsOn: ['zeta', 'alpha', 'mid', 'beta'] },
      ],
    });
    const ids = await Promise.all(Array.from({ length: 24 }, (_, i) => start('fan', {}, `fan-${i}`)));
    const orders = new Set<string>();
    for (const id of ids) {
      const run = await waitForRun(app, as, id);
      expect(run.status).toBe('succeeded');
      const order = [...(run.steps as Step[])].sort((a, b) => a.dispatchSeq! - b.dispatchSeq!).map((s) => s.stepId);
      orders.add(order.join(','));
    }
    expect([...orders]).toEqual(['root,alpha,beta,mid,zeta,join']);
  });

  it('skips disabled steps (their dependents still run) and skips dependents of a failed step as upstream_failed', async () => {
    await publishDag(app, app.tenantId, {
      id: 'mixed',
      steps: [
        { id: 'a', plugin: 'noop' },
        { id: 'off', plugin: 'noop', dependsOn: ['a'], disabled: true },
        { id: 'after-off', plugin: 'noop', dependsOn: ['off'] },
        { id: 'boom', plugin: 'noop', dependsOn: ['a'], with: { fail: true } },
        { id: 'after-boom', plugin: 'noop', dependsOn: ['boom'] },
        { id: 'deep', plugin: 'noop', dependsOn: ['after-boom', 'after-off'] },
      ],
    });
    const run = await waitForRun(app, as, await start('mixed'));
    expect(run.status).toBe('failed');
    const s = steps(run);
    expect(Object.fromEntries([...s].map(([k, v]) => [k, [v.status, v.reason]]))).toEqual({
      a: ['succeeded', null],
      off: ['skipped', 'disabled'],
      'after-off': ['succeeded', null],
      boom: ['failed', 'NOOP_FAIL'],
      'after-boom': ['skipped', 'upstream_failed'],
      deep: ['skipped', 'upstream_failed'],
    });
  });

  it('retries a retryable failure with backoff, one attempt row per try, then fails', async () => {
    await publishDag(app, app.tenantId, {
      id: 'retry',
      steps: [
        {
          id: 'flaky',
          plugin: 'noop',
          with: { fail: true, retryable: true },
          retry: { maxRetries: 2, initialDelay: 50, multiplier: 2 },
        },
      ],
    });
    const runId = await start('retry');
    const run = await waitForRun(app, as, runId);
    expect(run.status).toBe('failed');
    const at = await app.request('GET', `/api/v1/runs/${runId}/steps/flaky/attempts`, { as });
    expect(at.body.items.map((a: { attempt: number; status: string }) => [a.attempt, a.status])).toEqual([
      [1, 'failed'],
      [2, 'failed'],
      [3, 'failed'],
    ]);
    const ev = await events(runId);
    const retrying = ev.filter((e) => e.type === 'step.retrying');
    expect(retrying.map((e) => e.data.retryInMs)).toEqual([50, 100]);
    // The second attempt started no earlier than its backoff after the first finished.
    const a1 = at.body.items[0];
    const a2 = at.body.items[1];
    expect(Date.parse(a2.claimedUtc) - Date.parse(a1.finishedUtc)).toBeGreaterThanOrEqual(45);
    const traces = new Set(at.body.items.map((a: { traceparent: string }) => a.traceparent.split('-')[1]));
    expect([...traces]).toEqual([run.traceId]);
  });

  it('does not retry a non-retryable failure', async () => {
    await publishDag(app, app.tenantId, {
      id: 'noretry',
      steps: [
        {
          id: 'bad',
          plugin: 'noop',
          with: { fail: true, retryable: false },
          retry: { maxRetries: 3, initialDelay: 10 },
        },
      ],
    });
    const runId = await start('noretry');
    expect((await waitForRun(app, as, runId)).status).toBe('failed');
    const at = await app.request('GET', `/api/v1/runs/${runId}/steps/bad/attempts`, { as });
    expect(at.body.items).toHaveLength(1);
  });

  it('enforces a step timeout: the plugin is aborted and the step fails with TIMEOUT', async () => {
    await publishDag(app, app.tenantId, {
      id: 'slow',
      steps: [{ id: 'sleep', plugin: 'noop', with: { sleepMs: 10_000 }, timeout: 150 }],
    });
    const t0 = Date.now();
    const run = await waitForRun(app, as, await start('slow'));
    expect(Date.now() - t0).toBeLessThan(5_000);
    expect(run.status).toBe('failed');
    expect(steps(run).get('sleep')!.error!.code).toBe('TIMEOUT');
  });

  it('cancels a running run: the running plugin is aborted and the run ends cancelled', async () => {
    await publishDag(app, app.tenantId, chainDag('long', 2, { with: { sleepMs: 20_000 } }));
    const runId = await start('long');
    for (let i = 0; i < 200; i++) {
      const r = await app.request('GET', `/api/v1/runs/${runId}`, { as });
      if (r.body.steps[0].status === 'running') break;
      await new Promise((res) => setTimeout(res, 20));
    }
    const c = await app.request('POST', `/api/v1/runs/${runId}/cancel`, { as });
    expect(c.status).toBe(200);
    expect(c.body.status).toBe('cancelled');
    // The attempt ends (cancelled) promptly instead of sleeping 20 s.
    let status = '';
    for (let i = 0; i < 100 && status !== 'cancelled'; i++) {
      const at = await app.request('GET', `/api/v1/runs/${runId}/steps/s01/attempts`, { as });
      status = at.body.items[0]?.status;
      await new Promise((res) => setTimeout(res, 50));
    }
    expect(status).toBe('cancelled');
    const run = await app.request('GET', `/api/v1/runs/${runId}`, { as });
    expect(run.body.steps.map((s: Step) => s.status)).toEqual(['cancelled', 'cancelled']);
  });

  describe('chains (a step run right after the one it depends on, committed with it)', () => {
    type Attempt = {
      attempt: number;
      status: string;
      claimedUtc: string;
      terminatedUtc: string | null;
      traceparent: string;
    };
    const attempts = async (runId: string, stepId: string) =>
      (await app.request('GET', `/api/v1/runs/${runId}/steps/${stepId}/attempts`, { as })).body.items as Attempt[];

    it('runs each step of a chain as an attempt of its own, claimed before the result before it committed', async () => {
      // Each step takes 2 ms, so a link starts at least that long before the chain's commit (the
      // timestamps are to the millisecond: steps of no time at all run, and commit, within one).
      await publishDag(app, app.tenantId, chainDag('linked', 6, { with: { output: { v: 1 }, sleepMs: 2 } }));
      // The worker chains a DAG's steps once it holds the DAG's plan, which it loads when it first
      // runs one of its steps: a first run has it in place for the run measured here.
      await waitForRun(app, as, await start('linked'));
      const runId = await start('linked');
      const run = await waitForRun(app, as, runId);
      expect(run.status).toBe('succeeded');
      expect(run.steps.map((s: Step) => [s.stepId, s.dispatchSeq, s.attempts])).toEqual(
        ['s01', 's02', 's03', 's04', 's05', 's06'].map((id, i) => [id, i + 1, 1]),
      );
      const ev = await events(runId);
      expect(verifyChain(ev.map((e) => ({ ...e, tenantId: as.tenantId, runId, createdAt: e.createdUtc })))).toEqual({
        ok: true,
      });
      // One hop per result claims the next step in the transaction that ends the step before it; in
      // a chain the worker took it before that commit (its attempt's claim is the worker's time).
      const all = await Promise.all(run.steps.map((s: Step) => attempts(runId, s.stepId)));
      const ahead = all.slice(1).filter(([a], i) => Date.parse(a.claimedUtc) < Date.parse(all[i][0].terminatedUtc));
      expect(ahead.length).toBeGreaterThan(0);
      for (const [a] of all) expect(a.traceparent.split('-')[1]).toBe(run.traceId);
    });

    it('applies a failure in a chain to its attempt, with its retry policy', async () => {
      await publishDag(app, app.tenantId, {
        id: 'linked-fail',
        steps: [
          { id: 'a', plugin: 'noop' },
          {
            id: 'b',
            plugin: 'noop',
            dependsOn: ['a'],
            with: { fail: true, retryable: true },
            retry: { maxRetries: 1, initialDelay: 10 },
          },
          { id: 'c', plugin: 'noop', dependsOn: ['b'] },
        ],
      });
      const runId = await start('linked-fail');
      const run = await waitForRun(app, as, runId);
      expect(run.status).toBe('failed');
      expect(run.steps.map((s: Step) => [s.stepId, s.status])).toEqual([
        ['a', 'succeeded'],
        ['b', 'failed'],
        ['c', 'skipped'],
      ]);
      expect((await attempts(runId, 'b')).map((a) => [a.attempt, a.status])).toEqual([
        [1, 'failed'],
        [2, 'failed'],
      ]);
    });

    it('commits the results before a step that runs longer than the chain may wait; the step goes on as its attempt', async () => {
      await publishDag(app, app.tenantId, {
        id: 'linked-slow',
        steps: [
          { id: 'a', plugin: 'noop' },
          { id: 'b', plugin: 'noop', dependsOn: ['a'], with: { sleepMs: 1_500 } },
          { id: 'c', plugin: 'noop', dependsOn: ['b'] },
        ],
      });
      const runId = await start('linked-slow');
      let seen: string[] = [];
      for (let i = 0; i < 100; i++) {
        const r = await app.request('GET', `/api/v1/runs/${runId}`, { as });
        seen = r.body.steps.map((s: Step) => s.status);
        if (seen[1] === 'running') break;
        await new Promise((res) => setTimeout(res, 20));
      }
      // a's result is visible while b still runs (b has 1.5 s to go).
      expect(seen).toEqual(['succeeded', 'running', 'pending']);
      const run = await waitForRun(app, as, runId);
      expect(run.status).toBe('succeeded');
      const [b] = await attempts(runId, 'b');
      expect(b).toMatchObject({ attempt: 1, status: 'succeeded' });
      expect(await attempts(runId, 'b')).toHaveLength(1);
    });

    it('stops a chain when its run is cancelled', async () => {
      await publishDag(app, app.tenantId, {
        id: 'linked-cancel',
        steps: [
          { id: 'a', plugin: 'noop' },
          { id: 'b', plugin: 'noop', dependsOn: ['a'], with: { sleepMs: 20_000 } },
          { id: 'c', plugin: 'noop', dependsOn: ['b'] },
        ],
      });
      const runId = await start('linked-cancel');
      for (let i = 0; i < 200; i++) {
        const r = await app.request('GET', `/api/v1/runs/${runId}`, { as });
        if (r.body.steps[1].status === 'running') break;
        await new Promise((res) => setTimeout(res, 20));
      }
      const t0 = Date.now();
      expect((await app.request('POST', `/api/v1/runs/${runId}/cancel`, { as })).status).toBe(200);
      let status = '';
      for (let i = 0; i < 100 && status !== 'cancelled'; i++) {
        status = (await attempts(runId, 'b'))[0]?.status;
        await new Promise((res) => setTimeout(res, 50));
      }
      expect(status).toBe('cancelled');
      expect(Date.now() - t0).toBeLessThan(5_000);
      const run = await app.request('GET', `/api/v1/runs/${runId}`, { as });
      expect(run.body.steps.map((s: Step) => s.status)).toEqual(['succeeded', 'cancelled', 'cancelled']);
    });
  });

  it('reruns a failed run from a step, reusing the outputs of the steps upstream without executing them', async () => {
    await publishDag(app, app.tenantId, {
      id: 'rerunnable',
      steps: [
        { id: 'a', plugin: 'noop', with: { output: { v: 1 } } },
        { id: 'b', plugin: 'noop', dependsOn: ['a'], with: { fail: true } },
        { id: 'c', plugin: 'noop', dependsOn: ['b'], with: { output: { from: '${{ steps.a.outputs.v }}' } } },
      ],
    });
    const first = await waitForRun(app, as, await start('rerunnable'));
    expect(first.status).toBe('failed');
    const bad = await app.request('POST', `/api/v1/runs/${first.runId}/rerun`, { as, body: { fromStep: 'nope' } });
    expect(bad.status).toBe(404);
    const rr = await app.request('POST', `/api/v1/runs/${first.runId}/rerun`, { as, body: { fromStep: 'b' } });
    expect(rr.status).toBe(201);
    const second = await waitForRun(app, as, rr.body.runId);
    expect(second).toMatchObject({ rerunOf: first.runId, rerunFromStep: 'b', status: 'failed' });
    const s = steps(second);
    expect(s.get('a')).toMatchObject({ status: 'succeeded', fromRerun: true, attempts: 0, outputs: { v: 1 } });
    expect(s.get('a')!.outputsHash).toBe(steps(first).get('a')!.outputsHash);
    expect(s.get('b')).toMatchObject({ status: 'failed', attempts: 1 });
    const ev = await events(first.runId);
    expect(ev.at(-1)).toMatchObject({ type: 'run.rerun', data: { newRunId: rr.body.runId, fromStep: 'b' } });
  });

  it('queues runs beyond maxConcurrentRuns (action queue) and admits them one at a time', async () => {
    await publishDag(app, app.tenantId, {
      id: 'limited',
      constraints: { maxConcurrentRuns: { limit: 1, action: 'queue' } },
      steps: [{ id: 'w', plugin: 'noop', with: { sleepMs: 200 } }],
    });
    const ids = [await start('limited'), await start('limited'), await start('limited')];
    const waiting = await app.request('GET', `/api/v1/runs/${ids[2]}`, { as });
    expect(waiting.body.status).toBe('queued');
    const done = [];
    for (const id of ids) done.push(await waitForRun(app, as, id));
    expect(done.map((r) => r.status)).toEqual(['succeeded', 'succeeded', 'succeeded']);
    // Never two at once: each run's step starts after the previous one finished.
    const spans = done.map((r) => steps(r).get('w') as unknown as { startedUtc: string; finishedUtc: string });
    for (let i = 1; i < spans.length; i++)
      expect(Date.parse(spans[i].startedUtc)).toBeGreaterThanOrEqual(Date.parse(spans[i - 1].finishedUtc));
    const ev = await events(ids[1]);
    expect(ev.map((e) => e.type).slice(0, 4)).toEqual(['run.created', 'run.waiting', 'run.admitted', 'step.queued']);
  });

  describe('step concurrency', () => {
    type Attempt = { attempt: number; status: string; startedUtc: string; finishedUtc: string };
    const attemptsOf = async (runId: string, stepId: string) => {
      const r = await app.request('GET', `/api/v1/runs/${runId}/steps/${stepId}/attempts`, { as });
      expect(r.status).toBe(200);
      return r.body.items as Attempt[];
    };
    /** The most plugin executions (attempt start to finish, the worker's clock) under way at one time. */
    const mostAtOnce = (xs: Attempt[]) =>
      Math.max(
        ...xs.map((x) => {
          const t = Date.parse(x.startedUtc);
          return xs.filter((y) => Date.parse(y.startedUtc) <= t && t < Date.parse(y.finishedUtc)).length;
        }),
      );

    it('runs at most `concurrency` attempts of a step at once across runs, passing over them to other work', async () => {
      await publishDag(app, app.tenantId, {
        id: 'gated',
        steps: [
          { id: 'a', plugin: 'noop' },
          { id: 'g', plugin: 'noop', with: { sleepMs: 400 }, dependsOn: ['a'], concurrency: 1 },
        ],
      });
      await publishDag(app, app.tenantId, {
        id: 'gated-root',
        steps: [{ id: 'r', plugin: 'noop', with: { sleepMs: 250 }, concurrency: 2 }],
      });
      await publishDag(app, app.tenantId, { id: 'ungated', steps: [{ id: 'u', plugin: 'noop' }] });
      const gated = await Promise.all([1, 2, 3].map(() => start('gated')));
      const roots = await Promise.all([1, 2, 3, 4, 5].map(() => start('gated-root')));
      // Queued behind the gated steps, it does not wait for their slots.
      const free = await waitForRun(app, as, await start('ungated'));
      expect(free.status).toBe('succeeded');

      const done = await Promise.all([...gated, ...roots].map((id) => waitForRun(app, as, id)));
      expect(done.map((r) => r.status)).toEqual(Array(8).fill('succeeded'));
      const g = (await Promise.all(gated.map((id) => attemptsOf(id, 'g')))).flat();
      const r = (await Promise.all(roots.map((id) => attemptsOf(id, 'r')))).flat();
      expect(g).toHaveLength(3);
      expect(r).toHaveLength(5);
      expect(mostAtOnce(g)).toBe(1);
      expect(mostAtOnce(r)).toBe(2);
      // The free run ended while gated steps still waited for a slot.
      const lastStart = Math.max(...g.map((x) => Date.parse(x.startedUtc)));
      expect(Date.parse(free.finishedUtc)).toBeLessThan(lastStart);
    });

    it('keeps to the limit through retries', async () => {
      await publishDag(app, app.tenantId, {
        id: 'gated-retry',
        steps: [
          {
            id: 'f',
            plugin: 'noop',
            with: { sleepMs: 100, fail: true, retryable: true },
            retry: { maxRetries: 1, initialDelay: 10, multiplier: 1 },
            concurrency: 1,
          },
        ],
      });
      const ids = await Promise.all([1, 2, 3].map(() => start('gated-retry')));
      const done = await Promise.all(ids.map((id) => waitForRun(app, as, id)));
      expect(done.map((r) => r.status)).toEqual(['failed', 'failed', 'failed']);
      const f = (await Promise.all(ids.map((id) => attemptsOf(id, 'f')))).flat();
      expect(f).toHaveLength(6);
      expect(mostAtOnce(f)).toBe(1);
    });
  });

  it('skips runs beyond maxConcurrentRuns (action skip): they end cancelled with the reason', async () => {
    await publishDag(app, app.tenantId, {
      id: 'limited-skip',
      constraints: { maxConcurrentRuns: { limit: 1, action: 'skip' } },
      steps: [{ id: 'w', plugin: 'noop', with: { sleepMs: 300 } }],
    });
    const first = await start('limited-skip');
    const second = await start('limited-skip');
    const r2 = await app.request('GET', `/api/v1/runs/${second}`, { as });
    expect(r2.body).toMatchObject({ status: 'cancelled', reason: 'max_concurrent_runs' });
    expect((await waitForRun(app, as, first)).status).toBe('succeeded');
    // With the slot free again, the next run starts.
    expect((await waitForRun(app, as, await start('limited-skip'))).status).toBe('succeeded');
  });

  it('records maxExpectedRunTime as an event and lets the step finish', async () => {
    await publishDag(app, app.tenantId, {
      id: 'expected',
      steps: [
        {
          id: 'w',
          plugin: 'noop',
          with: { sleepMs: 400 },
          constraints: { maxExpectedRunTime: { after: 50, actions: [{ type: 'event' }] } },
        },
      ],
    });
    const runId = await start('expected');
    const run = await waitForRun(app, as, runId);
    expect(run.status).toBe('succeeded');
    const ev = await events(runId);
    expect(ev.find((e) => e.type === 'step.constraint_breached')).toMatchObject({
      stepId: 'w',
      data: { constraint: 'maxExpectedRunTime', effect: 'warned' },
    });
  });

  it('kills a step past maxAllowedRunTime and calls its webhook, signed with the tenant secret', async () => {
    const received: { headers: http.IncomingHttpHeaders; body: string }[] = [];
    let failFirst = true;
    const server = http.createServer((req, res) => {
      let body = '';
      req.on('data', (c: Buffer) => (body += c.toString()));
      req.on('end', () => {
        received.push({ headers: req.headers, body });
        // The first delivery fails: graphile-worker retries it.
        res.statusCode = failFirst ? 500 : 204;
        failFirst = false;
        res.end();
      });
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    try {
      const port = (server.address() as AddressInfo).port;
      const url = `http://127.0.0.1:${port}/hook`;
      await publishDag(app, app.tenantId, {
        id: 'allowed',
        steps: [
          {
            id: 'k',
            plugin: 'noop',
            with: { sleepMs: 20_000 },
            // The webhook host must be in the step's egress list (a loopback address only as an explicit IP entry).
            egress: [`127.0.0.1:${port}`],
            constraints: { maxAllowedRunTime: { after: 100, actions: [{ type: 'webhook', url }] } },
          },
        ],
      });
      const runId = await start('allowed');
      const run = await waitForRun(app, as, runId);
      expect(run.status).toBe('failed');
      expect(steps(run).get('k')!.error!.code).toBe('MAX_ALLOWED_RUN_TIME');
      for (let i = 0; i < 200 && received.length < 2; i++) await new Promise((r) => setTimeout(r, 100));
      expect(received.length).toBeGreaterThanOrEqual(2);
      const owner = new pg.Client({ connectionString: app.testDb.ownerUrl });
      await owner.connect();
      const { rows } = await owner.query<{ secret: string }>(
        'select secret from tenant_webhook_secret where tenant_id = $1',
        [app.tenantId],
      );
      await owner.end();
      const last = received.at(-1)!;
      const ts = last.headers['x-ordo-timestamp'] as string;
      expect(last.headers['x-ordo-signature']).toBe(`sha256=${signWebhook(rows[0].secret, ts, last.body)}`);
      expect(JSON.parse(last.body)).toMatchObject({
        runId,
        type: 'step.constraint_webhook',
        stepId: 'k',
        data: { constraint: 'maxAllowedRunTime', url },
      });

      // Not in the egress list: the webhook is not called; the denial is recorded.
      const before = received.length;
      await publishDag(app, app.tenantId, {
        id: 'denied-hook',
        steps: [
          {
            id: 'k',
            plugin: 'noop',
            with: { sleepMs: 20_000 },
            constraints: { maxAllowedRunTime: { after: 100, actions: [{ type: 'webhook', url }] } },
          },
        ],
      });
      const denied = await start('denied-hook');
      expect((await waitForRun(app, as, denied)).status).toBe('failed');
      let ev: Awaited<ReturnType<typeof events>> = [];
      for (let i = 0; i < 100 && !ev.some((e) => e.type === 'step.constraint_webhook_denied'); i++) {
        await new Promise((r) => setTimeout(r, 100));
        ev = await events(denied);
      }
      expect(ev.find((e) => e.type === 'step.constraint_webhook_denied')).toMatchObject({ stepId: 'k', data: { url } });
      expect(received.length).toBe(before);
    } finally {
      server.close();
    }
  }, 60_000);
});
