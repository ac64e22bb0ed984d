import fs from 'node:fs';
import path from 'node:path';
import { z } from 'zod';
import { FakeOrdo } from '../test/fake-ordo';
import { TaskError } from './errors';
import type { TransportKind } from './session';
import { SDK_VERSION } from './version';
import { OrdoWorker, type OrdoWorkerOptions } from './worker';

/** Resolves when `emitter` emits `event` with an argument that matches. */
function once<T>(
  worker: OrdoWorker,
  event: 'result' | 'cancelled' | 'refused' | 'offline' | 'transport' | 'task',
  match: (x: T) => boolean = () => true,
): Promise<T> {
  return new Promise((resolve) => {
    const on = (x: T) => {
      if (!match(x)) return;
      worker.off(event, on as never);
      resolve(x);
    };
    worker.on(event, on as never);
  });
}

/** Waits until `cond` holds (checked every 5 ms, for at most 10 s). */
async function until(cond: () => boolean): Promise<void> {
  for (let i = 0; i < 2_000 && !cond(); i++) await new Promise((r) => setTimeout(r, 5));
  if (!cond()) throw new Error('condition not reached');
}

describe('OrdoWorker', () => {
  let ordo: FakeOrdo;
  const workers: OrdoWorker[] = [];
  beforeEach(async () => {
    ordo = await new FakeOrdo().listen();
  });
  afterEach(async () => {
    for (const w of workers.splice(0)) await w.stop();
    await ordo.close();
  });

  const worker = (opts: Partial<OrdoWorkerOptions> = {}) => {
    const w = new OrdoWorker({
      urls: [ordo.url],
      token: ordo.token,
      tenantId: ordo.tenantId,
      name: 'resize-1',
      backoff: { baseMs: 5, maxMs: 50 },
      ...opts,
    });
    w.on('warning', () => undefined);
    workers.push(w);
    return w;
  };

  it('registers its task types with their schemas, resources and the SDK version', async () => {
    const w = worker({
      pool: 'gpu',
      maxConcurrent: 4,
      costPerSecond: 0.002,
      resources: { cpu: 8, memory: '16GiB', gpu: { count: 1, model: 'L4', vram: '24GiB' } },
      models: ['sd-xl'],
      labels: { zone: 'eu' },
    });
    w.handle('resize-image', {
      input: z.object({ url: z.string() }),
      output: { type: 'object', properties: { width: { type: 'integer' } } },
      run: () => ({ width: 1 }),
    });
    const reg = (await w.start())!;
    expect(reg.workerId).toBe(w.workerId);
    const registered = ordo.workers.get(reg.workerId)!.request;
    expect(registered).toEqual({
      name: 'resize-1',
      pool: 'gpu',
      taskTypes: [
        {
          name: 'resize-image',
          inputSchema: expect.objectContaining({ type: 'object', required: ['url'] }),
          outputSchema: { type: 'object', properties: { width: { type: 'integer' } } },
        },
      ],
      resources: { cpu: 8, memory: '16GiB', gpu: { count: 1, model: 'L4', vram: '24GiB' } },
      models: ['sd-xl'],
      maxConcurrent: 4,
      costPerSecond: 0.002,
      labels: { zone: 'eu' },
      sdkVersion: SDK_VERSION,
    });
  });

  it('keeps its version equal to the package version', () => {
    const pkg = JSON.parse(fs.readFileSync(path.join(__dirname, '..', 'package.json'), 'utf8')) as { version: string };
    expect(SDK_VERSION).toBe(pkg.version);
  });

  describe.each<TransportKind>(['websocket', 'long-poll'])('over %s', (transport) => {
    it('runs a task and posts its outputs', async () => {
      const w = worker({ transport });
      w.handle('double', { input: z.object({ n: z.number() }), run: ({ n }) => ({ n: n * 2 }) });
      await w.start();
      const task = ordo.enqueue('double', { n: 21 });
      await ordo.waitForResult(task.attemptId);
      expect(ordo.results.get(task.attemptId)).toMatchObject({
        body: { epoch: 1, status: 'succeeded', outputs: { n: 42 } },
        via: transport === 'websocket' ? 'websocket' : 'http',
      });
    });

    it('runs at most maxConcurrent tasks at once', async () => {
      const w = worker({ transport, maxConcurrent: 2 });
      let running = 0;
      let most = 0;
      const release: (() => void)[] = [];
      w.handle('hold', {
        run: () => {
          running++;
          most = Math.max(most, running);
          return new Promise<object>((resolve) =>
            release.push(() => {
              running--;
              resolve({});
            }),
          );
        },
      });
      await w.start();
      const tasks = [1, 2, 3, 4, 5].map(() => ordo.enqueue('hold'));
      for (let done = 0; done < tasks.length; done++) {
        const held = Math.min(2, tasks.length - done);
        await until(() => running === held);
        // Nothing beyond the two held is offered to the worker.
        expect(ordo.offered.size).toBe(done + held);
        release.shift()!();
      }
      await Promise.all(tasks.map((t) => ordo.waitForResult(t.attemptId)));
      expect(most).toBe(2);
    });

    it('aborts a cancelled task and posts nothing for it', async () => {
      const w = worker({ transport });
      let aborted = false;
      w.handle('slow', {
        run: (_i, ctx) =>
          new Promise((_resolve, reject) =>
            ctx.signal.addEventListener('abort', () => {
              aborted = true;
              reject(new Error('aborted'));
            }),
          ),
      });
      await w.start();
      const task = ordo.enqueue('slow');
      await once(w, 'task');
      const cancelled = once<{ attemptId: string; reason: string }>(w, 'cancelled');
      ordo.cancel(task.attemptId, 'run cancelled');
      expect(await cancelled).toEqual({ attemptId: task.attemptId, reason: 'run cancelled' });
      expect(aborted).toBe(true);
      // The worker is free again: a next task runs and its result is the only one posted.
      const next = ordo.enqueue('slow');
      await once(w, 'task', (t: { attemptId: string }) => t.attemptId === next.attemptId);
      expect(ordo.results.has(task.attemptId)).toBe(false);
    });

    it('posts progress reports of a running task', async () => {
      const w = worker({ transport });
      w.handle('report', {
        run: async (_i, ctx) => {
          ctx.progress(50, 'half way', { frames: 10 });
          return {};
        },
      });
      await w.start();
      const task = ordo.enqueue('report');
      await ordo.waitForResult(task.attemptId);
      await until(() => ordo.progress.length > 0);
      expect(ordo.progress).toEqual([
        { attemptId: task.attemptId, body: { epoch: 1, percent: 50, message: 'half way', data: { frames: 10 } } },
      ]);
    });

    it('registers again when the server says it is offline, aborting the tasks it held', async () => {
      const w = worker({ transport });
      let signal: AbortSignal | undefined;
      w.handle('t', {
        run: (_i, ctx) => {
          if (signal) return { ok: true };
          signal = ctx.signal;
          return new Promise((_resolve, reject) =>
            ctx.signal.addEventListener('abort', () => reject(new Error('aborted'))),
          );
        },
      });
      const first = (await w.start())!;
      ordo.enqueue('t');
      await once(w, 'task');
      const offline = once<{ workerId: string }>(w, 'offline');
      ordo.expire(first.workerId);
      expect((await offline).workerId).toBe(first.workerId);
      const second = await ordo.waitForRegistration(2);
      expect(signal!.aborted).toBe(true);
      const task = ordo.enqueue('t');
      await ordo.waitForResult(task.attemptId);
      expect(ordo.results.get(task.attemptId)!.workerId).toBe(second.id);
      expect(w.workerId).toBe(second.id);
    });

    it('swallows a result the server refuses (409) and keeps working', async () => {
      const w = worker({ transport });
      let open!: () => void;
      const gate = new Promise<void>((resolve) => (open = resolve));
      w.handle('t', {
        run: async () => {
          await gate;
          return {};
        },
      });
      await w.start();
      const stale = ordo.enqueue('t');
      const refused = once<{ code: string }>(w, 'refused');
      await until(() => ordo.offered.has(stale.attemptId));
      // The server moved the attempt to a later epoch meanwhile: this worker's result is stale.
      ordo.offered.get(stale.attemptId)!.task.epoch = 2;
      open();
      expect((await refused).code).toBe('STALE_EPOCH');
      const next = ordo.enqueue('t');
      await ordo.waitForResult(next.attemptId);
      expect(ordo.results.has(stale.attemptId)).toBe(false);
    });
  });

  it('asks the channel for a slot again as soon as its handler ends, before its result is acknowledged', async () => {
    const w = worker({ transport: 'websocket', maxConcurrent: 1 });
    w.handle('noop', { run: () => ({}) });
    await w.start();
    ordo.holdAcks = true;
    const tasks = [ordo.enqueue('noop'), ordo.enqueue('noop')];
    // The second task was offered on the credit the first handler's end gave back, its ack still held.
    await Promise.all(tasks.map((t) => ordo.waitForResult(t.attemptId)));
    expect(w.running).toBe(2);
    ordo.releaseAcks();
    await until(() => w.running === 0);
  });

  it('registers again when a call answers 404 WORKER_NOT_FOUND', async () => {
    const w = worker({ transport: 'long-poll' });
    w.handle('t', { run: () => ({}) });
    const first = (await w.start())!;
    // The server lost the registration altogether (e.g. a restored database).
    ordo.workers.get(first.workerId)!.deleted = true;
    const second = await ordo.waitForRegistration(2);
    const task = ordo.enqueue('t');
    await ordo.waitForResult(task.attemptId);
    expect(ordo.results.get(task.attemptId)!.workerId).toBe(second.id);
  });

  it('falls back to long-poll when the server has no channel', async () => {
    ordo.refuseChannel = true;
    const w = worker({ transport: 'websocket' });
    w.handle('t', { run: () => ({ ok: true }) });
    const fellBack = once<TransportKind>(w, 'transport');
    await w.start();
    expect(await fellBack).toBe('long-poll');
    const task = ordo.enqueue('t');
    await ordo.waitForResult(task.attemptId);
    expect(ordo.results.get(task.attemptId)!.via).toBe('http');
  });

  it('after falling back to long-poll for a channel that failed to open, tries it again, once a try, until it opens', async () => {
    // Three failures fall back; the first try after it fails too; the second opens.
    ordo.channelUnavailable = 4;
    const w = worker({ transport: 'websocket' });
    w.handle('t', { run: () => ({}) });
    const kinds: TransportKind[] = [];
    w.on('transport', (k: TransportKind) => kinds.push(k));
    await w.start();
    await until(() => kinds.includes('long-poll') && w.transport === 'websocket' && ordo.channels === 1);
    expect(kinds).toEqual(['long-poll', 'long-poll', 'websocket']);
    const task = ordo.enqueue('t');
    await ordo.waitForResult(task.attemptId);
    expect(ordo.results.get(task.attemptId)!.via).toBe('websocket');
  });

  it('opens the channel again after it drops and goes on taking tasks', async () => {
    const w = worker({ transport: 'websocket' });
    w.handle('t', { run: () => ({}) });
    await w.start();
    await once(w, 'transport');
    const reopened = once<TransportKind>(w, 'transport');
    ordo.dropChannel(w.workerId!);
    expect(await reopened).toBe('websocket');
    const task = ordo.enqueue('t');
    await ordo.waitForResult(task.attemptId);
    expect(ordo.results.get(task.attemptId)!.via).toBe('websocket');
  });

  /**
   * A worker on the channel with two slots, counting the runs of each attempt, one of them running
   * the `held` task until `release`.
   */
  const holding = async () => {
    const w = worker({ transport: 'websocket', maxConcurrent: 2 });
    let release!: () => void;
    const released = new Promise<void>((r) => (release = r));
    const runs = new Map<string, number>();
    w.handle('t', {
      run: async (input, ctx) => {
        runs.set(ctx.attemptId, (runs.get(ctx.attemptId) ?? 0) + 1);
        if ((input as { hold?: boolean }).hold) await released;
        return {};
      },
    });
    await w.start();
    await once(w, 'transport');
    const held = ordo.enqueue('t', { hold: true });
    await once<{ attemptId: string }>(w, 'task', (t) => t.attemptId === held.attemptId);
    return { w, held, runs, release };
  };

  it('after the channel drops, says what it holds: a task offered on the lost connection comes again, a held one does not', async () => {
    const { w, held, runs, release } = await holding();
    ordo.loseOffers = 1;
    const lost = ordo.enqueue('t');
    await until(() => ordo.offered.has(lost.attemptId));
    const reopened = once<TransportKind>(w, 'transport');
    ordo.dropChannel(w.workerId!);
    expect(await reopened).toBe('websocket');
    await ordo.waitForResult(lost.attemptId);
    expect(ordo.syncs).toEqual([{ workerId: w.workerId, holding: [held.attemptId], via: 'websocket' }]);
    release();
    await ordo.waitForResult(held.attemptId);
    expect(Object.fromEntries(runs)).toEqual({ [held.attemptId]: 1, [lost.attemptId]: 1 });
  });

  it('runs an attempt offered again while it runs once, and asks for the credit that offer took', async () => {
    const { w, held, runs, release } = await holding();
    await until(() => ordo.workers.get(w.workerId!)!.credit === 1);
    // The held attempt comes again on the worker's one free credit; the next task still gets a slot.
    ordo.reoffer(held.attemptId);
    const next = ordo.enqueue('t');
    await ordo.waitForResult(next.attemptId);
    expect(ordo.results.has(held.attemptId)).toBe(false);
    release();
    await ordo.waitForResult(held.attemptId);
    expect(Object.fromEntries(runs)).toEqual({ [held.attemptId]: 1, [next.attemptId]: 1 });
  });

  it('after a long-poll whose answer was lost, says what it holds before it pulls again, and gets the task again', async () => {
    const w = worker({ transport: 'long-poll' });
    w.handle('t', { run: () => ({}) });
    await w.start();
    ordo.losePolls = 1;
    const task = ordo.enqueue('t');
    await ordo.waitForResult(task.attemptId);
    expect(ordo.syncs).toEqual([{ workerId: w.workerId, holding: [], via: 'http' }]);
    const paths = ordo.requests.map((r) => r.path.replace(`/api/v1/workers/${w.workerId}`, ''));
    expect(paths.indexOf('/tasks/sync')).toBeLessThan(paths.lastIndexOf('/tasks/next'));
  });

  describe('results over HTTP', () => {
    /** A long-poll worker whose four handlers end together, one of them with a stale epoch. */
    const fourTogether = async () => {
      const w = worker({ transport: 'long-poll', maxConcurrent: 4 });
      let open!: () => void;
      const gate = new Promise<void>((resolve) => (open = resolve));
      let started = 0;
      w.handle('t', {
        run: async () => {
          started++;
          await gate;
          return {};
        },
      });
      await w.start();
      const tasks = [1, 2, 3, 4].map(() => ordo.enqueue('t'));
      await until(() => started === 4);
      ordo.offered.get(tasks[3].attemptId)!.task.epoch = 2;
      const refused = once<{ code: string }>(w, 'refused');
      open();
      return { w, tasks, refused };
    };
    const resultPosts = () =>
      ordo.requests.filter((r) => r.method === 'POST' && /\/tasks\/(results|[^/]+\/result)$/.test(r.path));

    it('posts results that end together in one post, each answered on its own', async () => {
      const { tasks, refused } = await fourTogether();
      expect((await refused).code).toBe('STALE_EPOCH');
      await Promise.all(tasks.slice(0, 3).map((t) => ordo.waitForResult(t.attemptId)));
      const posts = resultPosts();
      expect(posts.map((p) => p.path.split('/').pop())).toEqual(['results']);
      expect((posts[0].body as { results: { attemptId: string }[] }).results.map((r) => r.attemptId)).toEqual(
        tasks.map((t) => t.attemptId),
      );
      expect(ordo.results.has(tasks[3].attemptId)).toBe(false);
    });

    it.each([
      [404, 'ROUTE_NOT_FOUND', 'a server without the results route'],
      [400, 'VALIDATION_FAILED', 'a post refused as a whole'],
    ])('posts each result on its own after %s %s (%s)', async (status, code) => {
      ordo.failNext(/\/tasks\/results$/, status, code, 1_000);
      const { tasks, refused } = await fourTogether();
      expect((await refused).code).toBe('STALE_EPOCH');
      await Promise.all(tasks.slice(0, 3).map((t) => ordo.waitForResult(t.attemptId)));
      // Each result as the handler made it, not replaced by a failure.
      for (const t of tasks.slice(0, 3)) expect(ordo.results.get(t.attemptId)!.body.status).toBe('succeeded');
      const singles = resultPosts().filter((p) => p.path.endsWith('/result'));
      expect(singles.map((p) => p.path.split('/').slice(-2)[0]).sort()).toEqual(tasks.map((t) => t.attemptId).sort());
    });
  });

  it('goes on pulling from a server that has no sync route', async () => {
    const w = worker({ transport: 'long-poll' });
    w.handle('t', { run: () => ({}) });
    await w.start();
    ordo.failNext(/\/tasks\/sync$/, 404, 'ROUTE_NOT_FOUND', 1_000);
    ordo.losePolls = 1;
    ordo.enqueue('t');
    await until(() => ordo.requests.some((r) => r.path.endsWith('/tasks/sync')));
    const task = ordo.enqueue('t');
    await ordo.waitForResult(task.attemptId);
    expect(ordo.syncs).toEqual([]);
  });

  it('opens the channel again when it answers no heartbeat for a TTL, heartbeating over HTTP meanwhile', async () => {
    ordo.muteChannelHeartbeats = true;
    const w = worker({ transport: 'websocket' });
    w.handle('t', { run: () => ({}) });
    const reg = (await w.start())!;
    await until(() => ordo.channels >= 2);
    expect(ordo.requests.some((r) => r.path === `/api/v1/workers/${reg.workerId}/heartbeat`)).toBe(true);
    ordo.muteChannelHeartbeats = false;
    const task = ordo.enqueue('t');
    await ordo.waitForResult(task.attemptId);
  });

  it('heartbeats while it runs', async () => {
    const w = worker({ transport: 'long-poll', loaded: () => ['sd-xl'] });
    w.handle('t', { run: () => ({}) });
    const reg = (await w.start())!;
    for (let i = 0; i < 200 && ordo.workers.get(reg.workerId)!.heartbeats < 2; i++)
      await new Promise((r) => setTimeout(r, 10));
    expect(ordo.workers.get(reg.workerId)!.heartbeats).toBeGreaterThanOrEqual(2);
    expect(ordo.requests.find((r) => r.path.endsWith('/heartbeat'))!.body).toEqual({ loaded: ['sd-xl'] });
  });

  it('registers on the second URL when the first answers 503', async () => {
    const other = await new FakeOrdo().listen();
    try {
      other.failNext(/./, 503, 'UNAVAILABLE', 1_000);
      const w = worker({ urls: [other.url, ordo.url], transport: 'long-poll' });
      w.handle('t', { run: () => ({}) });
      await w.start();
      expect(ordo.workers.size).toBe(1);
      const task = ordo.enqueue('t');
      await ordo.waitForResult(task.attemptId);
    } finally {
      await other.close();
    }
  });

  it.each(['drain', 'stop'] as const)(
    'resolves start with no registration when %s comes before any server answered (SIGTERM at startup)',
    async (how) => {
      const w = worker({ urls: ['http://127.0.0.1:1'] });
      w.handle('t', { run: () => ({}) });
      const started = w.start();
      await new Promise((r) => setTimeout(r, 50));
      await w[how]();
      await expect(started).resolves.toBeUndefined();
      await expect(w.wait()).resolves.toBeUndefined();
    },
  );

  it('leaves no signal handler behind when drained before it started', async () => {
    const before = [process.listenerCount('SIGTERM'), process.listenerCount('SIGINT')];
    const w = worker({ handleSignals: true });
    w.handle('t', { run: () => ({}) });
    const started = w.start();
    await w.drain();
    await expect(started).resolves.toBeUndefined();
    expect([process.listenerCount('SIGTERM'), process.listenerCount('SIGINT')]).toEqual(before);
    expect(ordo.workers.size).toBe(0);
  });

  it('rejects start when the token is refused', async () => {
    const w = worker({ token: 'wrong' });
    w.handle('t', { run: () => ({}) });
    await expect(w.start()).rejects.toMatchObject({ status: 401, code: 'UNAUTHENTICATED' });
  });

  it('drains: takes no more tasks, finishes the held one, posts its result, then leaves', async () => {
    const w = worker({ transport: 'long-poll' });
    let finish!: () => void;
    w.handle('t', { run: () => new Promise<object>((resolve) => (finish = () => resolve({ done: true }))) });
    const reg = (await w.start())!;
    const held = ordo.enqueue('t');
    await once(w, 'task');
    const drained = w.drain();
    const stopped = w.wait();
    for (let i = 0; i < 200 && ordo.workers.get(reg.workerId)!.status !== 'draining'; i++)
      await new Promise((r) => setTimeout(r, 5));
    expect(ordo.workers.get(reg.workerId)!.status).toBe('draining');
    const later = ordo.enqueue('t');
    finish();
    await drained;
    await stopped;
    expect(ordo.results.get(held.attemptId)!.body).toMatchObject({ status: 'succeeded', outputs: { done: true } });
    expect(ordo.offered.has(later.attemptId)).toBe(false);
    expect(ordo.workers.get(reg.workerId)!.deleted).toBe(true);
  });

  it('fails a task with the class of the TaskError its handler throws', async () => {
    const w = worker({ transport: 'long-poll' });
    w.handle('t', {
      run: () => {
        throw new TaskError('invalid_input', 'NO_SUCH_IMAGE', 'the URL answers 404');
      },
    });
    await w.start();
    const task = ordo.enqueue('t');
    await ordo.waitForResult(task.attemptId);
    expect(ordo.results.get(task.attemptId)!.body.error).toEqual({
      class: 'invalid_input',
      code: 'NO_SUCH_IMAGE',
      message: 'the URL answers 404',
    });
  });
});
