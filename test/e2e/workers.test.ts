import { sql } from 'kysely';
import pg from 'pg';
import WebSocket from 'ws';
import { errorEnvelopeSchema } from '../../src/core/errors/error-envelope';
import { AuthRepository } from '../../src/modules/auth/auth.repository';
import { TokenService } from '../../src/modules/auth/token.service';
import { TaskInbox } from '../../src/modules/workers/task-inbox';
import { TasksService } from '../../src/modules/workers/tasks.service';
import { WorkersRepository } from '../../src/modules/workers/workers.repository';
import { startTestApp, type TestApp } from '../support/test-app';
import { refusal } from '../support/ws-refusal';
import { runEvents, waitForRun } from './runs-support';
import { offeredTasks, openChannel, type TestChannel, upgradeStatus } from './worker-channel-support';

type As = { token: string; tenantId: string };
type Task = {
  attemptId: string;
  runId: string;
  stepId: string;
  epoch: number;
  inputs: unknown;
  taskType: string;
  deadline: string;
};
type Step = {
  stepId: string;
  status: string;
  reason: string | null;
  outputs: unknown;
  error: { code: string; class?: string } | null;
  attempts: number;
  task?: { status: string; waitReason: string | null; worker: { name: string } | null; progress: unknown };
};
type Run = { runId: string; status: string; steps: Step[] };

const OUT = { type: 'object', required: ['width'], properties: { width: { type: 'integer' } } };

/** External workers over the worker protocol (REST and the channel), against real Ordo and PostgreSQL. */
describe('external workers', () => {
  let app: TestApp;
  let as: As;
  let seq = 0;

  const mint = async (pool: string, who: As = as, subject = `w-${++seq}`) => {
    const r = await app.request('POST', '/api/v1/tokens', { as: who, body: { scopes: ['worker'], pool, subject } });
    expect(r.status).toBe(201);
    return { token: r.body.token as string, tenantId: who.tenantId };
  };
  /** A worker token with its jti (to revoke it). */
  const minted = async (pool: string) => {
    const r = await app.request('POST', '/api/v1/tokens', {
      as,
      body: { scopes: ['worker'], pool, subject: `w-${++seq}` },
    });
    expect(r.status).toBe(201);
    return { token: r.body.token as string, tenantId: as.tenantId, jti: r.body.jti as string };
  };
  /** A worker token that expires in `seconds` (below the API's minimum of 60: minted and recorded directly). */
  const expiring = async (pool: string, seconds: number) => {
    const m = await app.ordo.app.get(TokenService).mintWorker(as.tenantId, `w-${++seq}`, pool, seconds);
    await app.ordo.database.withTenant(as.tenantId, (tx) =>
      app.ordo.app.get(AuthRepository).insertToken(tx, {
        jti: m.jti,
        subject: 'expiring',
        scopes: ['worker'],
        pool,
        description: null,
        createdBy: 'test',
        expiresAt: m.expiresAt,
      }),
    );
    return { token: m.token, tenantId: as.tenantId };
  };
  /** Heartbeats of the registered workers, stopped after each test. */
  const beats: NodeJS.Timeout[] = [];
  /**
   * Registers a worker that heartbeats in the background like an SDK worker does, so a slow
   * machine does not take it past its TTL; a `quiet` one is heard from only when it calls.
   */
  const register = async (w: As, body: Record<string, unknown>, opts: { quiet?: boolean } = {}) => {
    const r = await app.request('POST', '/api/v1/workers', {
      as: w,
      body: { name: `worker-${++seq}`, taskTypes: [{ name: 'resize', outputSchema: OUT }], ...body },
    });
    expect(r.status).toBe(201);
    const id = r.body.workerId as string;
    if (!opts.quiet) {
      beats.push(
        setInterval(() => void app.request('POST', `/api/v1/workers/${id}/heartbeat`, { as: w, body: {} }), 400),
      );
    }
    return id;
  };
  const next = (w: As, id: string, waitMs = 3_000, max = 1) =>
    app.request('GET', `/api/v1/workers/${id}/tasks/next?waitMs=${waitMs}&max=${max}`, { as: w });
  const take = async (w: As, id: string, waitMs = 5_000): Promise<Task> => {
    const r = await next(w, id, waitMs);
    expect(r.status).toBe(200);
    return r.body.tasks[0] as Task;
  };
  const result = (w: As, id: string, t: Task, body: Record<string, unknown>) =>
    app.request('POST', `/api/v1/workers/${id}/tasks/${t.attemptId}/result`, {
      as: w,
      body: { epoch: t.epoch, ...body },
    });
  const publish = async (id: string, step: Record<string, unknown>, extra: Record<string, unknown> = {}, who = as) => {
    const r = await app.request('POST', '/api/v1/dags', {
      as: who,
      body: { id, steps: [{ id: 'work', plugin: 'queue', ...step }], ...extra },
    });
    expect(r.status).toBe(201);
  };
  /** Publishes `id`: queue steps `first` and `second` after it, of task type resize (in `pool` when given; `second`'s config merged in). */
  const publishPair = async (id: string, opts: { pool?: string; second?: Record<string, unknown> } = {}) => {
    const on = { taskType: 'resize', ...(opts.pool !== undefined && { pool: opts.pool }) };
    const r = await app.request('POST', '/api/v1/dags', {
      as,
      body: {
        id,
        steps: [
          { id: 'first', plugin: 'queue', with: on },
          { id: 'second', plugin: 'queue', dependsOn: ['first'], with: { ...on, ...opts.second } },
        ],
      },
    });
    expect(r.status).toBe(201);
  };
  const start = async (dagId: string, inputs: unknown = {}, who = as) => {
    const r = await app.request('POST', '/api/v1/runs', {
      as: who,
      body: { dagId, inputs, runToken: `${dagId}-${++seq}` },
    });
    expect(r.status).toBe(201);
    return r.body.runId as string;
  };
  const run = async (runId: string, who = as) =>
    (await app.request('GET', `/api/v1/runs/${runId}`, { as: who })).body as Run;
  const work = (r: Run) => r.steps.find((s) => s.stepId === 'work')!;
  const until = async <T>(what: string, probe: () => Promise<T | undefined>): Promise<T> => {
    for (let i = 0; i < 400; i++) {
      const v = await probe();
      if (v !== undefined) return v;
      await new Promise((r) => setTimeout(r, 25));
    }
    throw new Error(`${what} never happened`);
  };
  /** Pulls until `n` tasks have been delivered to the worker. */
  const pullAll = async (w: As, id: string, n: number): Promise<Task[]> => {
    const tasks: Task[] = [];
    await until(`${n} tasks delivered`, async () => {
      const got = await next(w, id, 500, n);
      if (got.status === 200) tasks.push(...(got.body.tasks as Task[]));
      return tasks.length === n ? true : undefined;
    });
    return tasks;
  };
  /** Posts a success with `outputs` for every task, in one `tasks/results` post. */
  const succeedAll = (w: As, id: string, tasks: Task[], outputs: unknown) =>
    app.request('POST', `/api/v1/workers/${id}/tasks/results`, {
      as: w,
      body: { results: tasks.map((t) => ({ attemptId: t.attemptId, epoch: t.epoch, status: 'succeeded', outputs })) },
    });
  /**
   * Waits until a session of the test database waits for a lock (whose statement contains `statement`
   * when given; `what` names it in the failure). Within the caller's transaction the activity view is
   * a snapshot taken at its first look: it is cleared before each look.
   */
  const lockWaited = (owner: pg.Client, what: string, statement = '') =>
    until(what, async () => {
      await owner.query('select pg_stat_clear_snapshot()');
      const waiting = await owner.query(
        `select 1 from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock'
          and strpos(query, $1) > 0`,
        [statement],
      );
      return waiting.rowCount ? true : undefined;
    });
  const channel = (w: As, id: string, opts: { autoPong?: boolean } = {}) => openChannel(app.url, w, id, opts);
  /** The first task offered on a channel, once it is. */
  const firstOffer = (c: TestChannel) => until('the offer', async () => offeredTasks<Task>(c)[0]);
  /** Gives a worker a TTL no test outlives: it goes offline only for what the test does. */
  const longTtl = (workerId: string) =>
    app.ordo.database.withSystem(async (tx) => {
      await sql`update worker set ttl_ms = 600000 where worker_id = ${workerId}`.execute(tx);
    });
  /** Takes every worker of the tenant out of dispatch (each test starts from its own fixed worker set). */
  const retireAll = async () => {
    await app.ordo.database.withSystem(async (tx) => {
      await sql`update worker set status = 'offline', offline_at = now()`.execute(tx);
      await sql`update worker_task set status = 'cancelled', finished_at = now(), end_reason = 'test'
        where status in ('pending', 'assigned', 'delivered')`.execute(tx);
    });
  };

  beforeAll(async () => {
    app = await startTestApp({
      ORDO_ROLES: 'api,worker,scheduler',
      ORDO_EXTERNAL_WORKER_TTL_MS: '2000',
      ORDO_EXTERNAL_WORKER_SWEEP_MS: '200',
    });
    as = { token: app.adminToken, tenantId: app.tenantId };
  });

  afterAll(async () => {
    await app?.close();
  });

  beforeEach(retireAll);
  afterEach(() => {
    for (const b of beats.splice(0)) clearInterval(b);
  });

  describe('worker tokens', () => {
    it('mints a worker token bound to a pool, listed with its pool and last-seen', async () => {
      const w = await mint('gpu');
      await register(w, {});
      const list = await app.request('GET', '/api/v1/tokens?limit=500', { as });
      const rec = (list.body.items as { scopes: string[]; pool: string | null; lastSeenAt: string | null }[]).find(
        (t) => t.scopes[0] === 'worker' && t.pool === 'gpu',
      );
      expect(rec).toBeDefined();
      await until('the token seen', async () => {
        const l = await app.request('GET', '/api/v1/tokens?limit=500', { as });
        return (l.body.items as { pool: string | null; lastSeenAt: string | null }[]).find(
          (t) => t.pool === 'gpu' && t.lastSeenAt !== null,
        );
      });
    });

    it('refuses a worker token without a pool, with other scopes, or minted by a non-admin', async () => {
      const noPool = await app.request('POST', '/api/v1/tokens', { as, body: { scopes: ['worker'] } });
      expect(noPool.status).toBe(400);
      expect(noPool.body.error.code).toBe('POOL_REQUIRED');
      const mixed = await app.request('POST', '/api/v1/tokens', {
        as,
        body: { scopes: ['worker', 'orchestrator:read'], pool: 'a' },
      });
      expect(mixed.body.error.code).toBe('WORKER_SCOPE_ALONE');
      const poolOnly = await app.request('POST', '/api/v1/tokens', {
        as,
        body: { scopes: ['orchestrator:read'], pool: 'a' },
      });
      expect(poolOnly.body.error.code).toBe('POOL_WITHOUT_WORKER_SCOPE');
      const writer = { token: await app.token(app.tenantId, ['orchestrator:write']), tenantId: app.tenantId };
      const escalate = await app.request('POST', '/api/v1/tokens', {
        as: writer,
        body: { scopes: ['worker'], pool: 'a' },
      });
      expect(escalate.status).toBe(403);
    });

    it('a worker token reaches no tenant route, and a tenant token no worker route', async () => {
      const w = await mint('default');
      for (const [method, url] of [
        ['GET', '/api/v1/runs'],
        ['GET', '/api/v1/dags'],
        ['GET', '/api/v1/workers'],
        ['GET', '/api/v1/secrets'],
        ['POST', '/api/v1/tokens'],
      ] as const) {
        const r = await app.request(method, url, {
          as: w,
          body: method === 'POST' ? { scopes: ['worker'] } : undefined,
        });
        expect([url, r.status]).toEqual([url, 403]);
      }
      const admin = await app.request('POST', '/api/v1/workers', {
        as,
        body: { name: 'x', taskTypes: [{ name: 'resize' }] },
      });
      expect(admin.status).toBe(403);
    });

    it('a worker is acted for only with the token that registered it: another token of its pool finds no such worker', async () => {
      await publish('owned', { with: { taskType: 'resize' } });
      const a = await mint('default');
      const b = await mint('default');
      const id = await register(a, {});
      const runId = await start('owned');
      const t = await take(a, id);
      const calls: [string, string, unknown][] = [
        ['POST', `/api/v1/workers/${id}/heartbeat`, {}],
        ['GET', `/api/v1/workers/${id}/tasks/next?waitMs=0`, undefined],
        ['POST', `/api/v1/workers/${id}/tasks/sync`, { holding: [] }],
        ['POST', `/api/v1/workers/${id}/tasks/${t.attemptId}/progress`, { epoch: t.epoch, percent: 5 }],
        [
          'POST',
          `/api/v1/workers/${id}/tasks/${t.attemptId}/result`,
          { epoch: t.epoch, status: 'succeeded', outputs: { width: 1 } },
        ],
        ['POST', `/api/v1/workers/${id}/drain`, undefined],
        ['DELETE', `/api/v1/workers/${id}`, undefined],
      ];
      for (const [method, url, body] of calls) {
        const r = await app.request(method, url, { as: b, body });
        expect([url, r.status, r.body?.error?.code]).toEqual([url, 404, 'WORKER_NOT_FOUND']);
      }
      const code = await upgradeStatus(app.url, b, id);
      expect(code).toBe(404);
      // Nothing of it changed: the worker is online, holds its task, and its own result applies.
      const seen = (await app.request('GET', `/api/v1/workers/${id}`, { as })).body as { status: string };
      expect(seen.status).toBe('online');
      expect(work(await run(runId)).status).toBe('waiting');
      expect((await result(a, id, t, { status: 'succeeded', outputs: { width: 2 } })).status).toBe(200);
      expect(work(await waitForRun(app, as, runId)).outputs).toEqual({ width: 2 });
    });

    it("revoking a worker's token closes its channel at once (4401) and takes it offline, its task retried elsewhere", async () => {
      // Its offered task was delivered: orphaned with the worker, it is retried (its next attempt).
      await publish('revoked-chan', { with: { taskType: 'resize' }, retry: { maxRetries: 1, initialDelay: '10ms' } });
      const w = await minted('default');
      const id = await register(w, {}, { quiet: true });
      const c = await channel(w, id);
      c.ws.send(JSON.stringify({ type: 'ready', credit: 2 }));
      const runId = await start('revoked-chan');
      const offered = await firstOffer(c);
      expect(offered.runId).toBe(runId);
      expect((await app.request('POST', `/api/v1/tokens/${w.jti}/revoke`, { as })).status).toBe(200);
      expect(await c.closed).toBe(4401);
      const seen = (await app.request('GET', `/api/v1/workers/${id}`, { as })).body as { status: string };
      expect(seen.status).toBe('offline');
      // Its task goes to a worker whose token holds.
      const other = await mint('default');
      const otherId = await register(other, {});
      const t = await take(other, otherId, 10_000);
      expect(t.runId).toBe(runId);
    });

    it('a long-poll whose token is revoked while it waits hands out nothing: 401, and the task goes elsewhere', async () => {
      await publish('revoked-poll', { with: { taskType: 'resize' } });
      const w = await minted('default');
      const id = await register(w, {}, { quiet: true });
      const waiting = next(w, id, 20_000);
      // The pull is waiting (it found nothing) before the token is revoked and the task opened.
      await new Promise((r) => setTimeout(r, 300));
      expect((await app.request('POST', `/api/v1/tokens/${w.jti}/revoke`, { as })).status).toBe(200);
      const runId = await start('revoked-poll');
      const answer = await waiting;
      expect([answer.status, answer.body?.error?.code]).toEqual([401, 'TOKEN_REVOKED']);
      const other = await mint('default');
      const otherId = await register(other, {});
      const t = await take(other, otherId, 10_000);
      expect([t.runId, t.epoch]).toEqual([runId, 1]);
    });

    it('revoking the token of a worker that pulls by long-poll, while it runs a task, takes it offline at once: the task is retried elsewhere', async () => {
      await publish('revoked-busy', { with: { taskType: 'resize' }, retry: { maxRetries: 1, initialDelay: '10ms' } });
      const w = await minted('default');
      const id = await register(w, {}, { quiet: true });
      await longTtl(id);
      const runId = await start('revoked-busy');
      const held = await take(w, id);
      expect(held.runId).toBe(runId);
      expect((await app.request('POST', `/api/v1/tokens/${w.jti}/revoke`, { as })).status).toBe(200);
      await until('offline', async () =>
        ((await app.request('GET', `/api/v1/workers/${id}`, { as })).body as { status: string }).status === 'offline'
          ? true
          : undefined,
      );
      const other = await mint('default');
      const otherId = await register(other, {});
      const t = await take(other, otherId, 10_000);
      expect(t.runId).toBe(runId);
      expect(t.epoch).toBeGreaterThan(held.epoch);
    });

    it('disabling a tenant takes its long-poll workers offline at once', async () => {
      const b = await app.tenant(`wp-${process.pid}`);
      const w = await mint('default', b);
      const id = await register(w, {}, { quiet: true });
      await longTtl(id);
      const op = { token: app.platformToken };
      expect((await app.request('POST', `/api/v1/tenants/${b.tenantId}/disable`, { as: op })).status).toBe(200);
      await until('offline', () =>
        app.ordo.database.withSystem(async (tx) => {
          const r = await sql<{ status: string }>`select status from worker where worker_id = ${id}`.execute(tx);
          return r.rows[0].status === 'offline' ? true : undefined;
        }),
      );
      expect((await app.request('POST', `/api/v1/tenants/${b.tenantId}/enable`, { as: op })).status).toBe(200);
      const seen = (await app.request('GET', `/api/v1/workers/${id}`, { as: b })).body as { status: string };
      expect(seen.status).toBe('offline');
    });

    it("disabling a tenant closes its workers' channels (4403)", async () => {
      const b = await app.tenant(`wd-${process.pid}`);
      const w = await mint('default', b);
      const id = await register(w, {}, { quiet: true });
      const c = await channel(w, id);
      const op = { token: app.platformToken };
      expect((await app.request('POST', `/api/v1/tenants/${b.tenantId}/disable`, { as: op })).status).toBe(200);
      expect(await c.closed).toBe(4403);
    });

    it("closes a worker's channel when its token expires", async () => {
      const w = await expiring('default', 2);
      const id = await register(w, {}, { quiet: true });
      const c = await channel(w, id);
      expect(await c.closed).toBe(4401);
    });
  });

  describe('registration', () => {
    it('refuses malformed schemas, another pool and duplicate task types, writing nothing', async () => {
      const w = await mint('default');
      const before = await app.ordo.database.withSystem(
        async (tx) => (await sql<{ n: number }>`select count(*)::int as n from worker`.execute(tx)).rows[0].n,
      );
      const bad = await app.request('POST', '/api/v1/workers', {
        as: w,
        body: { name: 'x', taskTypes: [{ name: 'resize', outputSchema: { type: 'no-such-type' } }] },
      });
      expect(bad.status).toBe(400);
      expect(bad.body.error.code).toBe('SCHEMA_INVALID');
      const pool = await app.request('POST', '/api/v1/workers', {
        as: w,
        body: { name: 'x', pool: 'gpu', taskTypes: [{ name: 'resize' }] },
      });
      expect(pool.status).toBe(403);
      expect(pool.body.error.code).toBe('POOL_MISMATCH');
      const dup = await app.request('POST', '/api/v1/workers', {
        as: w,
        body: { name: 'x', taskTypes: [{ name: 'resize' }, { name: 'resize' }] },
      });
      expect(dup.body.error.code).toBe('DUPLICATE_TASK_TYPE');
      const size = await app.request('POST', '/api/v1/workers', {
        as: w,
        body: { name: 'x', taskTypes: [{ name: 'resize' }], resources: { memory: 'lots' } },
      });
      expect(size.status).toBe(400);
      // A size past what the registry holds (8 PiB) is refused as well, not a server error.
      for (const memory of ['10000000000000000000B', '9999999999TiB']) {
        const big = await app.request('POST', '/api/v1/workers', {
          as: w,
          body: { name: 'x', taskTypes: [{ name: 'resize' }], resources: { memory } },
        });
        expect([memory, big.status]).toEqual([memory, 400]);
      }
      const after = await app.ordo.database.withSystem(
        async (tx) => (await sql<{ n: number }>`select count(*)::int as n from worker`.execute(tx)).rows[0].n,
      );
      expect(after).toBe(before);
    });
  });

  describe('tasks', () => {
    it('hands a queue step to a worker with templated inputs; the result ends the step, once', async () => {
      await publish(
        'resize-one',
        { with: { taskType: 'resize', inputs: { url: '${{ inputs.url }}', size: 3 } }, timeout: '1m' },
        { inputs: { type: 'object', properties: { url: { type: 'string' } } } },
      );
      const w = await mint('default');
      const id = await register(w, {});
      const runId = await start('resize-one', { url: 'https://example.test/a.png' });
      const t = await take(w, id);
      expect(t).toMatchObject({
        runId,
        stepId: 'work',
        taskType: 'resize',
        inputs: { url: 'https://example.test/a.png', size: 3 },
      });
      expect(
        (await result(w, id, { ...t, epoch: t.epoch + 1 }, { status: 'succeeded', outputs: { width: 1 } })).body.error
          .code,
      ).toBe('STALE_EPOCH');
      const ok = await result(w, id, t, { status: 'succeeded', outputs: { width: 10 } });
      expect(ok.status).toBe(200);
      expect(ok.body).toEqual({ outcome: 'succeeded', duplicate: false });
      const again = await result(w, id, t, { status: 'succeeded', outputs: { width: 10 } });
      expect(again.body).toEqual({ outcome: 'succeeded', duplicate: true });
      const other = await result(w, id, t, { status: 'succeeded', outputs: { width: 11 } });
      expect(other.status).toBe(409);
      expect(other.body.error.code).toBe('RESULT_CONFLICT');
      const done = await waitForRun(app, as, runId);
      expect(done.status).toBe('succeeded');
      const r = await run(runId);
      expect(work(r).outputs).toEqual({ width: 10 });
      expect(work(r).task).toMatchObject({ status: 'succeeded', worker: { name: expect.any(String) } });
      const events = await runEvents(app, as, runId);
      expect(events.map((e) => e.type)).toContain('step.worker_result');
      const unknown = await app.request(
        'POST',
        `/api/v1/workers/${id}/tasks/00000000-0000-4000-8000-000000000000/result`,
        { as: w, body: { epoch: 0, status: 'succeeded', outputs: {} } },
      );
      expect(unknown.status).toBe(404);
      expect(unknown.body.error.code).toBe('TASK_NOT_FOUND');
      const malformed = await app.request('POST', `/api/v1/workers/${id}/tasks/${t.attemptId}/result`, {
        as: w,
        body: { epoch: t.epoch, status: 'failed' },
      });
      expect(malformed.status).toBe(400);
    });

    it('applies several results in one post, each answered as its own post would be', async () => {
      await publish('batched', { with: { taskType: 'resize' } });
      const w = await mint('default');
      const id = await register(w, { maxConcurrent: 8 });
      const runs = [await start('batched'), await start('batched'), await start('batched')];
      const tasks: Task[] = [];
      while (tasks.length < 3) {
        const r = await next(w, id, 5_000, 3);
        expect(r.status).toBe(200);
        tasks.push(...(r.body.tasks as Task[]));
      }
      const [t1, t2, t3] = runs.map((runId) => tasks.find((t) => t.runId === runId)!);
      const post = (results: Record<string, unknown>[], who: As = w, worker = id) =>
        app.request('POST', `/api/v1/workers/${worker}/tasks/results`, { as: who, body: { results } });
      const unknownId = '00000000-0000-4000-8000-000000000000';
      const first = await post([
        { attemptId: t1.attemptId, epoch: t1.epoch, status: 'succeeded', outputs: { width: 1 } },
        { attemptId: t2.attemptId, epoch: t2.epoch + 1, status: 'succeeded', outputs: { width: 2 } },
        {
          attemptId: t3.attemptId,
          epoch: t3.epoch,
          status: 'failed',
          error: { class: 'permanent', code: 'BROKEN', message: 'no' },
        },
        { attemptId: unknownId, epoch: 0, status: 'succeeded', outputs: {} },
      ]);
      expect(first.status).toBe(200);
      expect(first.body.results).toEqual([
        { attemptId: t1.attemptId, answer: { outcome: 'succeeded', duplicate: false } },
        { attemptId: t2.attemptId, refused: { status: 409, code: 'STALE_EPOCH', message: expect.any(String) } },
        {
          attemptId: t3.attemptId,
          answer: { outcome: 'failed', duplicate: false, error: { code: 'BROKEN', message: 'no' } },
        },
        { attemptId: unknownId, refused: { status: 404, code: 'TASK_NOT_FOUND', message: expect.any(String) } },
      ]);
      // The refused result changed nothing: its step still waits for it.
      expect(work(await run(runs[1])).status).toBe('waiting');

      // Malformed posts are refused as a whole and change nothing: no result, one task twice, one
      // result malformed, too many results.
      const ok2 = { attemptId: t2.attemptId, epoch: t2.epoch, status: 'succeeded', outputs: { width: 2 } };
      for (const results of [
        [],
        [ok2, ok2],
        [ok2, { attemptId: t1.attemptId, epoch: t1.epoch, status: 'failed' }],
        Array.from({ length: 101 }, (_, i) => ({
          ...ok2,
          attemptId: `00000000-0000-4000-8000-${String(i).padStart(12, '0')}`,
        })),
      ]) {
        const bad = await post(results);
        expect(bad.status).toBe(400);
        expect(bad.body.error.code).toBe('VALIDATION_FAILED');
      }
      expect(work(await run(runs[1])).status).toBe('waiting');

      // Another tenant's worker reaches neither this worker nor its tasks.
      const b = await app.tenant(`wr-${process.pid}`);
      const wb = await mint('default', b);
      const idB = await register(wb, {});
      expect((await post([ok2], wb, id)).status).toBe(404);
      const foreign = await post([ok2], wb, idB);
      expect(foreign.body.results).toEqual([
        { attemptId: t2.attemptId, refused: { status: 404, code: 'TASK_NOT_FOUND', message: expect.any(String) } },
      ]);
      expect(work(await run(runs[1])).status).toBe('waiting');

      const again = await post([
        { attemptId: t1.attemptId, epoch: t1.epoch, status: 'succeeded', outputs: { width: 1 } },
        ok2,
      ]);
      expect(again.body.results).toEqual([
        { attemptId: t1.attemptId, answer: { outcome: 'succeeded', duplicate: true } },
        { attemptId: t2.attemptId, answer: { outcome: 'succeeded', duplicate: false } },
      ]);
      expect((await waitForRun(app, as, runs[0])).status).toBe('succeeded');
      expect((await waitForRun(app, as, runs[1])).status).toBe('succeeded');
      expect((await waitForRun(app, as, runs[2])).status).toBe('failed');
      expect(work(await run(runs[1])).outputs).toEqual({ width: 2 });
      expect(work(await run(runs[2])).error).toMatchObject({ code: 'BROKEN' });
    });

    it("frees a worker's slot once its result is in, while the result's transaction still waits", async () => {
      await publish('slot', { with: { taskType: 'resize' } });
      const w = await mint('default');
      const id = await register(w, { maxConcurrent: 1 });
      const first = await start('slot');
      const t1 = await take(w, id);
      const second = await start('slot');
      // The worker holds its one task: the second waits in the pool.
      expect((await next(w, id, 300)).status).toBe(204);
      const owner = new pg.Client({ connectionString: app.testDb.ownerUrl });
      await owner.connect();
      try {
        // The first run's row is locked: the result's transaction waits for it.
        await owner.query('begin');
        await owner.query('select 1 from run where run_id = $1 for update', [first]);
        const posted = result(w, id, t1, { status: 'succeeded', outputs: { width: 1 } });
        await lockWaited(owner, 'the result waiting for its run');
        // The next dispatch of the pool (a third run's task opened) counts the slot as free.
        await start('slot');
        const t2 = await take(w, id);
        expect(t2.runId).toBe(second);
        expect(work(await run(first)).task?.status).toBe('delivered');
        expect((await next(w, id, 300)).status).toBe(204);
        await owner.query('rollback');
        expect((await posted).body).toEqual({ outcome: 'succeeded', duplicate: false });
        expect((await waitForRun(app, as, first)).status).toBe('succeeded');
      } finally {
        await owner.end();
      }
    });

    it("hands a queue step a result makes ready over to its task in that result's transaction, templated from it", async () => {
      await publishPair('relay', { second: { inputs: { w: '${{ steps.first.outputs.width }}' } } });
      const w = await mint('default');
      const id = await register(w, {});
      const runId = await start('relay');
      const first = await take(w, id);
      expect(first.stepId).toBe('first');
      expect((await result(w, id, first, { status: 'succeeded', outputs: { width: 5 } })).status).toBe(200);
      // Committed with the result: the second step waits for its worker with its task open.
      const [opened] = await app.ordo.database.withSystem(
        async (tx) =>
          (
            await sql<{ status: string; worker_id: string; task: string }>`
              select s.status, a.worker_id, t.status as task from step s
              join attempt a on a.tenant_id = s.tenant_id and a.run_id = s.run_id and a.step_id = s.step_id
              join worker_task t on t.tenant_id = s.tenant_id and t.run_id = s.run_id and t.step_id = s.step_id
              where s.run_id = ${runId}::uuid and s.step_id = 'second'`.execute(tx)
          ).rows,
      );
      expect(opened).toMatchObject({ status: 'waiting', worker_id: expect.stringMatching(/:api$/) as unknown });
      const second = await take(w, id);
      expect(second).toMatchObject({ runId, stepId: 'second', inputs: { w: 5 } });
      expect((await result(w, id, second, { status: 'succeeded', outputs: { width: 6 } })).status).toBe(200);
      const done = await waitForRun(app, as, runId);
      expect(done.status).toBe('succeeded');
      // The same record as a step the built-in worker handed back, by this process's hand-over.
      const events = await runEvents(app, as, runId);
      const of = (stepId: string) => events.filter((e) => e.stepId === stepId).map((e) => e.type);
      expect(of('second')).toEqual(of('first'));
      expect(events.find((e) => e.stepId === 'second' && e.type === 'step.waiting')?.actor).toMatch(/:api$/);
      expect(of('second')).toEqual([
        'step.queued',
        'step.running',
        'step.waiting',
        'step.worker_result',
        'step.succeeded',
      ]);
    });

    it("applies other runs' results in a second transaction while a batch waits on its run, holding back that run's", async () => {
      await publish('single', { with: { taskType: 'resize' } });
      const r = await app.request('POST', '/api/v1/dags', {
        as,
        body: {
          id: 'pair',
          steps: [
            { id: 'a', plugin: 'queue', with: { taskType: 'resize' } },
            { id: 'b', plugin: 'queue', with: { taskType: 'resize' } },
          ],
        },
      });
      expect(r.status).toBe(201);
      const w = await mint('default');
      const id = await register(w, { maxConcurrent: 40 });
      const pair = await start('pair');
      const singles: string[] = [];
      for (let i = 0; i < 32; i++) singles.push(await start('single'));
      const tasks = await pullAll(w, id, 34);
      const [a, b] = ['a', 'b'].map((s) => tasks.find((t) => t.runId === pair && t.stepId === s)!);
      const others = tasks.filter((t) => t.runId !== pair);
      const owner = new pg.Client({ connectionString: app.testDb.ownerUrl });
      await owner.connect();
      try {
        await owner.query('begin');
        await owner.query('select 1 from run where run_id = $1 for update', [pair]);
        const postedA = result(w, id, a, { status: 'succeeded', outputs: { width: 1 } });
        await lockWaited(owner, 'the first batch waiting for its run');
        // The run's other result waits for the batch that holds the run; other runs' go on.
        const postedB = result(w, id, b, { status: 'succeeded', outputs: { width: 2 } });
        const many = await succeedAll(w, id, others, { width: 3 });
        expect(many.status).toBe(200);
        expect(
          (many.body.results as { answer?: { outcome: string } }[]).every((x) => x.answer?.outcome === 'succeeded'),
        ).toBe(true);
        const steps = await owner.query<{ step_id: string; status: string }>(
          'select step_id, status from step where run_id = $1 order by step_id',
          [pair],
        );
        expect(steps.rows).toEqual([
          { step_id: 'a', status: 'waiting' },
          { step_id: 'b', status: 'waiting' },
        ]);
        await owner.query('rollback');
        expect((await postedA).body).toEqual({ outcome: 'succeeded', duplicate: false });
        expect((await postedB).body).toEqual({ outcome: 'succeeded', duplicate: false });
        expect((await waitForRun(app, as, pair)).status).toBe('succeeded');
        for (const runId of singles) expect((await waitForRun(app, as, runId)).status).toBe('succeeded');
      } finally {
        await owner.end();
      }
    });

    it('applies the results of one run that arrive together in one transaction', async () => {
      const r = await app.request('POST', '/api/v1/dags', {
        as,
        body: {
          id: 'pair-together',
          steps: ['a', 'b', 'c'].map((id) => ({ id, plugin: 'queue', with: { taskType: 'resize' } })),
        },
      });
      expect(r.status).toBe(201);
      const w = await mint('default');
      const id = await register(w, { maxConcurrent: 3 });
      const runId = await start('pair-together');
      const tasks = await pullAll(w, id, 3);
      const posted = await succeedAll(w, id, tasks, { width: 1 });
      expect(posted.status).toBe(200);
      expect((await waitForRun(app, as, runId)).status).toBe('succeeded');
      const xids = await app.ordo.database.withSystem(
        async (tx) =>
          (
            await sql<{ xid: string }>`
              select distinct stream_xid::text as xid from run_event
              where run_id = ${runId}::uuid and type = 'step.worker_result'`.execute(tx)
          ).rows,
      );
      expect(xids).toHaveLength(1);
    });

    it("hands a queue step over while its tenant's built-in steps fill its in-flight cap (a hand-over takes no lease)", async () => {
      await publishPair('relay-capped');
      await publish('hold', { plugin: 'noop', with: { sleepMs: 4000 } });
      const w = await mint('default');
      const id = await register(w, {});
      const runId = await start('relay-capped');
      const first = await take(w, id);
      const owner = new pg.Client({ connectionString: app.testDb.ownerUrl });
      await owner.connect();
      try {
        await owner.query('update tenant_queue set max_in_flight = 1 where tenant_id = $1', [as.tenantId]);
        // A built-in step holds the tenant's one slot in flight.
        const held = await start('hold');
        await until('the built-in step running', async () =>
          work(await run(held)).status === 'running' ? true : undefined,
        );
        expect((await result(w, id, first, { status: 'succeeded', outputs: { width: 1 } })).status).toBe(200);
        // Committed with the result, although the tenant is at its cap: the built-in queue would
        // have kept it queued until the slot freed.
        const { rows } = await owner.query<{ status: string; worker_id: string }>(
          `select s.status, a.worker_id from step s
           join attempt a on a.tenant_id = s.tenant_id and a.run_id = s.run_id and a.step_id = s.step_id
           where s.run_id = $1 and s.step_id = 'second'`,
          [runId],
        );
        expect(rows).toEqual([{ status: 'waiting', worker_id: expect.stringMatching(/:api$/) as unknown }]);
        expect(work(await run(held)).status).toBe('running');
        const second = await take(w, id);
        expect(second).toMatchObject({ runId, stepId: 'second' });
        expect((await result(w, id, second, { status: 'succeeded', outputs: { width: 2 } })).status).toBe(200);
        expect((await waitForRun(app, as, runId)).status).toBe('succeeded');
        expect((await waitForRun(app, as, held)).status).toBe('succeeded');
      } finally {
        await owner.query('update tenant_queue set max_in_flight = null where tenant_id = $1', [as.tenantId]);
        await owner.end();
      }
    });

    it('dispatches a pool once for each commit that opens its tasks or frees its slots: a result that readies a queue step wakes no second dispatch', async () => {
      // The earlier tests' workers, offline now, are not released meanwhile (each release wakes a dispatch).
      await retireAll();
      await publishPair('relay-counted', { pool: 'counted' });
      const wakeUps = async () => {
        const m = await app.request('GET', '/metrics', { as: { token: app.platformToken } });
        expect(m.status).toBe(200);
        return Number(/^orchestrator_task_dispatches_total\{by="wake-up"\} (\d+)$/m.exec(m.text)![1]);
      };
      const w = await mint('counted');
      const registered = await wakeUps();
      const id = await register(w, {});
      // The registration wakes the pool's dispatch.
      await until('the registration dispatch', async () => ((await wakeUps()) > registered ? true : undefined));
      const before = await wakeUps();
      const runs = 4;
      for (let i = 0; i < runs; i++) {
        const runId = await start('relay-counted');
        const first = await take(w, id);
        expect((await result(w, id, first, { status: 'succeeded', outputs: { width: 1 } })).status).toBe(200);
        const second = await take(w, id);
        expect(second).toMatchObject({ runId, stepId: 'second' });
        expect((await result(w, id, second, { status: 'succeeded', outputs: { width: 2 } })).status).toBe(200);
        expect((await waitForRun(app, as, runId)).status).toBe('succeeded');
      }
      // A run's dispatches: the first task opened; its result, which frees the slot and opens the
      // second task in one commit; the second's result.
      await until('the dispatches', async () => ((await wakeUps()) - before >= 3 * runs ? true : undefined));
      await new Promise((go) => setTimeout(go, 500));
      expect((await wakeUps()) - before).toBe(3 * runs);
    });

    it('a long-poll whose look found nothing while its task was being assigned takes it at once, not at its deadline', async () => {
      await retireAll();
      await publish('late-look', { with: { taskType: 'resize', pool: 'looking' } });
      const w = await mint('looking');
      const id = await register(w, {});
      const repo = app.ordo.app.get(WorkersRepository);
      const inbox = app.ordo.app.get(TaskInbox);
      const deliver = repo.deliver;
      let runId: string | undefined;
      // The pull's first look finds nothing; before it answers, a task is opened and assigned to the
      // worker, and the wake-up that says so is heard while the pull does not wait yet.
      repo.deliver = async (...args: Parameters<typeof deliver>) => {
        const rows = await deliver.apply(repo, args);
        if (args[1] === id && runId === undefined && rows.length === 0) {
          const heard = inbox.mark(w.tenantId, id);
          runId = await start('late-look');
          await until('the wake-up heard', async () => (inbox.mark(w.tenantId, id) !== heard ? true : undefined));
        }
        return rows;
      };
      try {
        const late = new Promise<'late'>((go) => setTimeout(() => go('late'), 10_000).unref());
        const answer = await Promise.race([next(w, id, 30_000), late]);
        expect(answer).not.toBe('late');
        const t = (answer as Awaited<ReturnType<typeof next>>).body.tasks[0] as Task;
        expect(t).toMatchObject({ runId, stepId: 'work' });
        expect((await result(w, id, t, { status: 'succeeded', outputs: { width: 1 } })).status).toBe(200);
        expect((await waitForRun(app, as, runId!)).status).toBe('succeeded');
      } finally {
        repo.deliver = deliver;
      }
    });

    it('fails the step with CONTRACT_VIOLATION when the outputs do not match the output schema', async () => {
      await publish('resize-bad', { with: { taskType: 'resize' } });
      const w = await mint('default');
      const id = await register(w, {});
      const runId = await start('resize-bad');
      const t = await take(w, id);
      const r = await result(w, id, t, { status: 'succeeded', outputs: { width: 'wide' } });
      expect(r.body).toMatchObject({ outcome: 'failed', error: { code: 'CONTRACT_VIOLATION' } });
      expect((await waitForRun(app, as, runId)).status).toBe('failed');
      expect(work(await run(runId)).error).toMatchObject({ code: 'CONTRACT_VIOLATION' });
    });

    it('fails the step with UNKNOWN_STATUS for a named status the step does not declare, as for a built-in plugin', async () => {
      await publish('named', { with: { taskType: 'resize' }, statuses: ['ok', 'bad'] });
      await publish('unnamed', { with: { taskType: 'resize' } });
      const w = await mint('default');
      const id = await register(w, {});
      const cases: [string, Record<string, unknown>, string, string | null][] = [
        ['named', { namedStatus: 'other' }, 'failed', 'UNKNOWN_STATUS'],
        ['named', {}, 'failed', 'UNKNOWN_STATUS'],
        ['unnamed', { namedStatus: 'bogus' }, 'failed', 'UNKNOWN_STATUS'],
        ['named', { namedStatus: 'ok' }, 'succeeded', null],
      ];
      for (const [dag, extra, status, code] of cases) {
        const runId = await start(dag);
        const t = await take(w, id);
        expect((await result(w, id, t, { status: 'succeeded', outputs: { width: 1 }, ...extra })).status).toBe(200);
        const step = work(await waitForRun(app, as, runId));
        expect([dag, extra, step.status, step.error?.code ?? null]).toEqual([dag, extra, status, code]);
      }
    });

    it("fails the step with QUOTA_EXCEEDED when a worker's outputs would pass the plan's maxArtifactBytes", async () => {
      const b = await app.tenant(`wq-${process.pid}`);
      const op = { token: app.platformToken };
      const plan = `wq-${process.pid}`;
      expect(
        (await app.request('POST', '/api/v1/plans', { as: op, body: { id: plan, limits: { maxArtifactBytes: 100 } } }))
          .status,
      ).toBe(201);
      expect(
        (await app.request('PUT', `/api/v1/tenants/${b.tenantId}/plan`, { as: op, body: { planId: plan } })).status,
      ).toBe(200);
      await publish('quota', { with: { taskType: 'resize' } }, {}, b);
      const w = await mint('default', b);
      const id = await register(w, { taskTypes: [{ name: 'resize' }] });
      const runId = await start('quota', {}, b);
      const t = await take(w, id);
      const r = await result(w, id, t, { status: 'succeeded', outputs: { blob: 'x'.repeat(500) } });
      expect(r.status).toBe(200);
      const step = work(await waitForRun(app, b, runId));
      expect([step.status, step.error?.code]).toEqual(['failed', 'QUOTA_EXCEEDED']);
    });

    it('refuses outputs over the size limit with 413 and changes nothing', async () => {
      await publish('resize-big', { with: { taskType: 'resize' } });
      const w = await mint('default');
      const id = await register(w, {});
      const runId = await start('resize-big');
      const t = await take(w, id);
      const big = await result(w, id, t, { status: 'succeeded', outputs: { width: 1, blob: 'x'.repeat(1_100_000) } });
      expect(big.status).toBe(413);
      expect(work(await run(runId)).status).toBe('waiting');
      expect((await result(w, id, t, { status: 'succeeded', outputs: { width: 2 } })).status).toBe(200);
    });

    it('refuses a required size over 8PiB at publish, and a template that renders one fails only its step', async () => {
      for (const requires of [{ memory: '>=9000000TiB' }, { vram: '99999999999TiB' }]) {
        const r = await app.request('POST', '/api/v1/dags', {
          as,
          body: { id: 'huge', steps: [{ id: 'work', plugin: 'queue', with: { taskType: 'resize', requires } }] },
        });
        expect([r.status, r.body.error.code]).toEqual([400, 'DAG_INVALID']);
        expect(r.body.error.message).toMatch(/at most 8PiB/);
      }
      await publish('huge-tmpl', { with: { taskType: 'resize', requires: { vram: '${{ inputs.v }}' } } });
      await publish('plain', { with: { taskType: 'resize' } });
      const huge = await start('huge-tmpl', { v: '9000000TiB' });
      const failed = work(await waitForRun(app, as, huge));
      expect([failed.status, failed.error?.code]).toEqual(['failed', 'CONFIG_INVALID']);
      // A requirement stored beyond bigint (a version published before the bound) fits no worker:
      // the pool's dispatch and the run's record go on.
      const stuck = await start('plain');
      await until('its task, changed', () =>
        app.ordo.database.withSystem(async (tx) => {
          const r = await sql`update worker_task set requires = '{"memoryBytes": 1e22}'
            where run_id = ${stuck} and status = 'pending'`.execute(tx);
          return Number(r.numAffectedRows) === 1 ? true : undefined;
        }),
      );
      const w = await mint('default');
      const id = await register(w, { resources: { memory: '64GiB' } });
      const plain = await start('plain');
      expect((await take(w, id)).runId).toBe(plain);
      const explained = await app.request('GET', `/api/v1/runs/${stuck}`, { as });
      expect(explained.status).toBe(200);
      expect(work(explained.body as Run).reason).toBe('no_matching_worker');
    });

    it("a queue step's timeout bounds its work on a worker, from its assignment, not its wait for one", async () => {
      await publish('slow-to-find', { with: { taskType: 'resize' }, timeout: '1s' });
      const runId = await start('slow-to-find');
      // No worker for twice its timeout (the sweep runs every 200 ms): the step still waits.
      await new Promise((r) => setTimeout(r, 2_000));
      expect(work(await run(runId)).status).toBe('waiting');
      const w = await mint('default');
      const id = await register(w, {});
      const t = await take(w, id);
      expect(t.runId).toBe(runId);
      expect(Date.parse(t.deadline)).toBeGreaterThan(Date.now());
      expect((await result(w, id, t, { status: 'succeeded', outputs: { width: 1 } })).status).toBe(200);
      expect((await waitForRun(app, as, runId)).status).toBe('succeeded');
      // Waiting is bounded by dispatchTimeout alone, however short the timeout: DISPATCH_TIMEOUT, not retried.
      await retireAll();
      await publish('never-found', {
        with: { taskType: 'resize' },
        timeout: '500ms',
        dispatchTimeout: '1500ms',
        retry: { maxRetries: 2 },
      });
      const unfound = await start('never-found');
      const failed = work(await waitForRun(app, as, unfound));
      expect([failed.status, failed.error?.code, failed.attempts]).toEqual(['failed', 'DISPATCH_TIMEOUT', 1]);
    });

    it('a task the sweep found overdue but that changed since (back in the pool, no deadline) is left alone', async () => {
      await publish('changed-since', { with: { taskType: 'resize' } });
      const runId = await start('changed-since');
      const task = await until('its task', () =>
        app.ordo.database.withSystem(async (tx) => {
          const r = await sql<{ task_id: string }>`select task_id from worker_task
            where run_id = ${runId} and status = 'pending'`.execute(tx);
          return r.rows[0];
        }),
      );
      await app.ordo.app.get(TasksService).overdue(as.tenantId, task.task_id, 'default');
      expect(work(await run(runId)).status).toBe('waiting');
      const w = await mint('default');
      const id = await register(w, {});
      expect((await take(w, id)).runId).toBe(runId);
    });

    it('says why a step waits when no worker matches, and fails it past its dispatchTimeout', async () => {
      await publish('needs-gpu', {
        with: { taskType: 'resize', requires: { gpu: 1, vram: '>=16GiB' } },
        dispatchTimeout: '2s',
      });
      const w = await mint('default');
      await register(w, { resources: { gpu: { count: 1, vram: '8GiB' } } });
      const runId = await start('needs-gpu');
      await until('the reason', async () =>
        work(await run(runId)).reason === 'no_matching_worker' ? true : undefined,
      );
      const done = await waitForRun(app, as, runId);
      expect(done.status).toBe('failed');
      expect(work(await run(runId)).error).toMatchObject({ code: 'DISPATCH_TIMEOUT' });
    });

    it('a worker of another tenant or pool never receives the task, nor sees the worker', async () => {
      const b = await app.tenant(`wb-${process.pid}`);
      await publish('iso', { with: { taskType: 'resize' } });
      await publish('iso', { with: { taskType: 'resize' } }, {}, b);
      const wb = await mint('default', b);
      const idB = await register(wb, {});
      const wGpu = await mint('gpu');
      const idGpu = await register(wGpu, {});
      const runA = await start('iso');
      expect((await next(wb, idB, 600)).status).toBe(204);
      expect((await next(wGpu, idGpu, 600)).status).toBe(204);
      expect(work(await run(runA)).reason).toBe('no_matching_worker');
      // Another tenant's or pool's worker id is not found through the worker routes or the tenant routes.
      expect((await next(wb, idGpu, 0)).status).toBe(404);
      expect((await next(wGpu, idB, 0)).status).toBe(404);
      expect((await app.request('GET', `/api/v1/workers/${idB}`, { as })).status).toBe(404);
      expect((await app.request('GET', `/api/v1/workers/${idGpu}`, { as: b })).status).toBe(404);
      // Tenant B's own run goes to its worker.
      const runB = await start('iso', {}, b);
      const t = await take(wb, idB);
      expect(t.runId).toBe(runB);
    });
  });

  describe('determinism', () => {
    it('gives the same dispatch order, events and outputs on every run of the same DAG, inputs and worker results', async () => {
      const r = await app.request('POST', '/api/v1/dags', {
        as,
        body: {
          id: 'det',
          steps: [
            { id: 'before', plugin: 'noop', with: { output: { n: '${{ inputs.n }}' } } },
            {
              id: 'work',
              plugin: 'queue',
              dependsOn: ['before'],
              with: { taskType: 'resize', inputs: { n: '${{ steps.before.outputs.n }}' } },
            },
            {
              id: 'after',
              plugin: 'noop',
              dependsOn: ['work'],
              with: { output: { w: '${{ steps.work.outputs.width }}' } },
            },
          ],
        },
      });
      expect(r.status).toBe(201);
      const w = await mint('default');
      const id = await register(w, { name: 'det-worker' });
      let want: unknown;
      for (let i = 0; i < 20; i++) {
        const runId = await start('det', { n: 7 });
        const t = await take(w, id);
        expect(t.inputs).toEqual({ n: 7 });
        expect((await result(w, id, t, { status: 'succeeded', outputs: { width: 7 } })).status).toBe(200);
        const done = (await waitForRun(app, as, runId)) as Run & { outputsHash: string };
        const got = {
          outputsHash: done.outputsHash,
          steps: done.steps.map((x) => [x.stepId, x.status, (x as Step & { dispatchSeq: number }).dispatchSeq]).sort(),
          // (A run's creation names its own token and trace.)
          events: (await runEvents(app, as, runId)).map((e) => [
            e.type,
            e.stepId,
            e.actor,
            e.type === 'run.created' ? null : e.data,
          ]),
        };
        if (i === 0) want = got;
        else expect(got).toEqual(want);
      }
    });
  });

  describe('dispatch strategies', () => {
    /** Registers workers (name → cost), starts `n` runs and returns which worker got each, in order. */
    const choices = async (
      dagId: string,
      strategy: string,
      workers: { name: string; cost: number; max?: number }[],
      n: number,
    ) => {
      await publish(dagId, { with: { taskType: 'resize', strategy } });
      const w = await mint('default');
      const ids = new Map<string, string>();
      for (const x of workers)
        ids.set(
          await register(w, { name: `${dagId}-${x.name}`, costPerSecond: x.cost, maxConcurrent: x.max ?? 10 }),
          x.name,
        );
      const got: string[] = [];
      for (let i = 0; i < n; i++) {
        const runId = await start(dagId);
        const name = await until('the assignment', async () => {
          const s = work(await run(runId));
          return s.task?.worker?.name;
        });
        got.push(name.slice(dagId.length + 1));
      }
      return got;
    };

    it('cheapest takes the lowest cost every time', async () => {
      expect(
        await choices(
          's-cheap',
          'cheapest',
          [
            { name: 'a', cost: 3 },
            { name: 'b', cost: 1 },
            { name: 'c', cost: 2 },
          ],
          3,
        ),
      ).toEqual(['b', 'b', 'b']);
    });

    it('least_connections spreads over the workers holding the fewest tasks', async () => {
      const got = await choices(
        's-least',
        'least_connections',
        [
          { name: 'a', cost: 1 },
          { name: 'b', cost: 1 },
          { name: 'c', cost: 1 },
        ],
        3,
      );
      expect([...got].sort()).toEqual(['a', 'b', 'c']);
    });

    it('round_robin goes around the workers in id order', async () => {
      const got = await choices(
        's-rr',
        'round_robin',
        [
          { name: 'a', cost: 1 },
          { name: 'b', cost: 1 },
        ],
        4,
      );
      expect(new Set(got).size).toBe(2);
      expect(got[0]).not.toBe(got[1]);
      expect(got[2]).toBe(got[0]);
      expect(got[3]).toBe(got[1]);
    });

    it('a full worker is passed over', async () => {
      expect(
        await choices(
          's-full',
          'cheapest',
          [
            { name: 'a', cost: 1, max: 1 },
            { name: 'b', cost: 5 },
          ],
          3,
        ),
      ).toEqual(['a', 'b', 'b']);
    });

    it('tasks of different requirements pending together each go to a worker that fits them', async () => {
      await publish('mix-gpu', { with: { taskType: 'resize', requires: { gpu: 1 }, strategy: 'cheapest' } });
      await publish('mix-any', { with: { taskType: 'resize', strategy: 'cheapest' } });
      // Pending before any worker: the first registration's dispatch looks at all four in one pass,
      // the gpu tasks (no fit yet) between the others.
      const gpuRuns = [await start('mix-gpu')];
      const anyRuns = [await start('mix-any')];
      gpuRuns.push(await start('mix-gpu'));
      anyRuns.push(await start('mix-any'));
      for (const id of [...gpuRuns, ...anyRuns])
        await until('the task', async () => ((await run(id)).steps[0].task ? true : undefined));
      const w = await mint('default');
      await register(w, { name: 'mix-cpu', costPerSecond: 1, maxConcurrent: 10 });
      await register(w, { name: 'mix-gpu', costPerSecond: 5, maxConcurrent: 10, resources: { gpu: { count: 1 } } });
      const takers = async (ids: string[]) =>
        Promise.all(ids.map((id) => until('the assignment', async () => work(await run(id)).task?.worker?.name)));
      expect(await takers(anyRuns)).toEqual(['mix-cpu', 'mix-cpu']);
      expect(await takers(gpuRuns)).toEqual(['mix-gpu', 'mix-gpu']);
    });
  });

  describe('dispatch by warmth and value', () => {
    it('default prefers a worker with the required models loaded, then the cheapest', async () => {
      await publish('warm', { with: { taskType: 'resize', requires: { models: ['sdxl'] } } });
      await publish('warm-cheap', {
        with: { taskType: 'resize', requires: { models: ['sdxl'] }, strategy: 'cheapest' },
      });
      const w = await mint('default');
      const cold = await register(w, { name: 'cold', costPerSecond: 1, models: ['sdxl'], maxConcurrent: 10 });
      const warm = await register(w, { name: 'warm', costPerSecond: 2, models: ['sdxl'], maxConcurrent: 10 });
      await register(w, { name: 'no-model', costPerSecond: 0, maxConcurrent: 10 });
      const hb = await app.request('POST', `/api/v1/workers/${warm}/heartbeat`, { as: w, body: { loaded: ['sdxl'] } });
      expect(hb.body.status).toBe('online');
      const byDefault = await start('warm');
      expect((await take(w, warm)).runId).toBe(byDefault);
      const byCost = await start('warm-cheap');
      expect((await take(w, cold)).runId).toBe(byCost);
    });

    it('best_value weighs cost by reputation', async () => {
      await publish('value-fail', { with: { taskType: 'resize', strategy: 'cheapest' } });
      await publish('value', { with: { taskType: 'resize', strategy: 'best_value' } });
      const w = await mint('default');
      const cheap = await register(w, { name: `cheap-${process.pid}`, costPerSecond: 1, maxConcurrent: 10 });
      for (let i = 0; i < 2; i++) {
        await start('value-fail');
        const t = await take(w, cheap);
        await result(w, cheap, t, { status: 'failed', error: { class: 'permanent', code: 'BROKEN', message: 'no' } });
      }
      // Reputations are recorded just after the results that judge them.
      const rep = await until('the reputation', async () => {
        const listed = (await app.request('GET', '/api/v1/workers', { as })).body.items as {
          workerId: string;
          reputation: { score: number; tasks: number; blocked: boolean };
        }[];
        const r = listed.find((x) => x.workerId === cheap)!.reputation;
        return r.tasks === 2 ? r : undefined;
      });
      expect(rep.blocked).toBe(false);
      expect(rep.score).toBeCloseTo(0.25, 3);
      // The dearer worker registers now and the cheap one is heard from again, so that neither is
      // past its TTL when the task is dispatched.
      const dear = await register(w, { name: `dear-${process.pid}`, costPerSecond: 1.5, maxConcurrent: 10 });
      expect((await app.request('POST', `/api/v1/workers/${cheap}/heartbeat`, { as: w, body: {} })).status).toBe(200);
      const runId = await start('value');
      expect((await take(w, dear)).runId).toBe(runId);
    });
  });

  describe('secrets in task inputs', () => {
    it('refuses secret references without allowSecrets, and seals them at rest with it', async () => {
      expect(
        (await app.request('PUT', '/api/v1/secrets/RESIZE_KEY', { as, body: { value: 's3cr3t-value' } })).status,
      ).toBeLessThan(300);
      const refused = await app.request('POST', '/api/v1/dags', {
        as,
        body: {
          id: 'sec-no',
          steps: [
            { id: 'work', plugin: 'queue', with: { taskType: 'resize', inputs: { key: '${{ secrets.RESIZE_KEY }}' } } },
          ],
        },
      });
      expect(refused.status).toBe(400);
      expect(refused.text).toContain('allowSecrets');
      await publish('sec-yes', {
        with: { taskType: 'resize', allowSecrets: true, inputs: { key: '${{ secrets.RESIZE_KEY }}' } },
      });
      const w = await mint('default');
      const id = await register(w, {});
      const runId = await start('sec-yes');
      await until('the task', async () => (work(await run(runId)).task ? true : undefined));
      const stored = await app.ordo.database.withSystem(
        async (tx) =>
          (
            await sql<{
              inputs: unknown;
              sealed: unknown;
            }>`select inputs, inputs_sealed as sealed from worker_task where run_id = ${runId}`.execute(tx)
          ).rows[0],
      );
      expect(stored.inputs).toBeNull();
      expect(JSON.stringify(stored.sealed)).not.toContain('s3cr3t-value');
      const t = await take(w, id);
      expect(t.inputs).toEqual({ key: 's3cr3t-value' });
    });

    it('redacts those secrets from what the worker sends back: outputs, logs, error and progress', async () => {
      const secret = `echo-${process.pid}-k3y`;
      expect(
        (await app.request('PUT', '/api/v1/secrets/ECHO_KEY', { as, body: { value: secret } })).status,
      ).toBeLessThan(300);
      await publish('sec-echo', {
        with: { taskType: 'resize', allowSecrets: true, inputs: { key: '${{ secrets.ECHO_KEY }}' } },
      });
      const w = await mint('default');
      const id = await register(w, {});
      const sealed = async (runId: string) =>
        app.ordo.database.withSystem(
          async (tx) =>
            (
              await sql<{
                secrets: unknown;
              }>`select secrets_sealed as secrets from worker_task where run_id = ${runId}`.execute(tx)
            ).rows[0].secrets,
        );

      // A worker that echoes the secret in its progress, logs and outputs (plain and base64).
      const okRun = await start('sec-echo');
      const t = await take(w, id);
      expect(t.inputs).toEqual({ key: secret });
      const atRest = await sealed(okRun);
      expect(atRest).not.toBeNull();
      expect(JSON.stringify(atRest)).not.toContain(secret);
      const p = await app.request('POST', `/api/v1/workers/${id}/tasks/${t.attemptId}/progress`, {
        as: w,
        body: { epoch: t.epoch, percent: 50, message: `using ${secret}`, data: { key: secret } },
      });
      expect(p.status).toBe(202);
      const ok = await result(w, id, t, {
        status: 'succeeded',
        outputs: { width: 3, echo: `key=${secret}`, b64: Buffer.from(secret).toString('base64') },
        logs: [{ level: 'info', message: `got ${secret}` }],
      });
      expect(ok.status).toBe(200);
      expect((await waitForRun(app, as, okRun)).status).toBe('succeeded');
      const done = work(await run(okRun));
      expect(done.outputs).toEqual({ width: 3, echo: 'key=[redacted]', b64: '[redacted]' });
      expect(done.task?.progress).toMatchObject({ message: 'using [redacted]', data: { key: '[redacted]' } });
      const attempts = await app.request('GET', `/api/v1/runs/${okRun}/steps/work/attempts`, { as });
      const logsHash = (attempts.body.items as { logsHash: string | null }[]).at(-1)!.logsHash!;
      const logs = await app.request('GET', `/api/v1/artifacts/${logsHash}`, { as });
      expect(logs.status).toBe(200);
      expect(logs.text).toContain('got [redacted]');
      expect(await sealed(okRun)).toBeNull();

      // A failure whose message carries it.
      const failRun = await start('sec-echo');
      const f = await take(w, id);
      const failed = await result(w, id, f, {
        status: 'failed',
        error: { class: 'permanent', code: 'ECHOED', message: `refused ${secret}` },
      });
      expect(failed.status).toBe(200);
      expect((await waitForRun(app, as, failRun)).status).toBe('failed');
      expect(work(await run(failRun)).error).toMatchObject({ code: 'ECHOED', message: 'refused [redacted]' });

      for (const runId of [okRun, failRun]) {
        const seen = JSON.stringify([
          await run(runId),
          await runEvents(app, as, runId),
          (await app.request('GET', `/api/v1/runs/${runId}/attempts`, { as })).body,
        ]);
        expect(seen).toContain('[redacted]');
        expect(seen).not.toContain(secret);
      }
    });
  });

  describe('reputation', () => {
    it('blocks a worker whose results violate its contract, until an operator resets it', async () => {
      await publish('rep', { with: { taskType: 'resize' } });
      const w = await mint('default');
      const id = await register(w, { name: `rep-${process.pid}` });
      for (let i = 0; i < 2; i++) {
        await start('rep');
        const t = await take(w, id);
        await result(w, id, t, { status: 'succeeded', outputs: { nope: true } });
      }
      const seen = await until('the block', async () => {
        const b = (await app.request('GET', `/api/v1/workers/${id}`, { as })).body;
        return b.reputation.tasks === 2 ? b : undefined;
      });
      expect(seen.reputation).toMatchObject({ blocked: true, violations: 2 });
      expect(seen.reputation.score).toBeLessThan(0.2);
      const runId = await start('rep');
      expect((await next(w, id, 600)).status).toBe(204);
      expect(work(await run(runId)).reason).toBe('workers_busy');
      const reset = await app.request('POST', `/api/v1/workers/${id}/reputation/reset`, {
        as,
        body: { reason: 'fixed the output encoder' },
      });
      expect(reset.status).toBe(200);
      expect(reset.body.reputation.blocked).toBe(false);
      const t = await take(w, id);
      expect(t.runId).toBe(runId);
      const reader = { token: await app.token(app.tenantId, ['orchestrator:write']), tenantId: app.tenantId };
      expect(
        (await app.request('POST', `/api/v1/workers/${id}/reputation/reset`, { as: reader, body: { reason: 'x' } }))
          .status,
      ).toBe(403);
    });
  });

  describe('liveness', () => {
    it('orphans the task of a worker that stops heartbeating; it retries elsewhere and the late result is refused', async () => {
      await publish('lost', {
        with: { taskType: 'resize' },
        retry: { maxRetries: 2, initialDelay: '10ms' },
      });
      const w = await mint('default');
      const quiet = await register(w, { name: 'quiet' }, { quiet: true });
      // It heartbeats until it holds the task, then falls silent.
      const alive = setInterval(
        () => void app.request('POST', `/api/v1/workers/${quiet}/heartbeat`, { as: w, body: {} }),
        400,
      );
      const runId = await start('lost');
      const t = await take(w, quiet).finally(() => clearInterval(alive));
      const live = await register(w, { name: 'live' });
      const beat = setInterval(
        () => void app.request('POST', `/api/v1/workers/${live}/heartbeat`, { as: w, body: {} }),
        400,
      );
      try {
        const t2 = await take(w, live, 10_000);
        expect(t2.runId).toBe(runId);
        expect(t2.attemptId).not.toBe(t.attemptId);
        const late = await result(w, quiet, t, { status: 'succeeded', outputs: { width: 1 } });
        expect(late.status).toBe(409);
        expect(late.body.error.code).toBe('TASK_ORPHANED');
        expect((await result(w, live, t2, { status: 'succeeded', outputs: { width: 2 } })).status).toBe(200);
        expect((await waitForRun(app, as, runId)).status).toBe('succeeded');
        const types = (await runEvents(app, as, runId)).map((e) => e.type);
        expect(types).toContain('step.result_rejected');
        const hb = await app.request('POST', `/api/v1/workers/${quiet}/heartbeat`, { as: w, body: {} });
        expect(hb.body.status).toBe('offline');
        expect((await next(w, quiet, 0)).body.error.code).toBe('WORKER_OFFLINE');
        const attempts = (await app.request('GET', `/api/v1/runs/${runId}/steps/work/attempts`, { as })).body.items as {
          status: string;
        }[];
        expect(attempts.filter((a) => a.status === 'succeeded')).toHaveLength(1);
      } finally {
        clearInterval(beat);
      }
    });

    it('a draining worker gets no new task and finishes the one it holds', async () => {
      await publish('drain', { with: { taskType: 'resize' } });
      const w = await mint('default');
      const id = await register(w, {});
      const r1 = await start('drain');
      const t = await take(w, id);
      expect((await app.request('POST', `/api/v1/workers/${id}/drain`, { as: w })).body).toEqual({
        status: 'draining',
      });
      const r2 = await start('drain');
      expect((await next(w, id, 2_000)).status).toBe(204);
      expect((await result(w, id, t, { status: 'succeeded', outputs: { width: 1 } })).status).toBe(200);
      expect((await waitForRun(app, as, r1)).status).toBe('succeeded');
      expect(work(await run(r2)).status).toBe('waiting');
      expect((await app.request('DELETE', `/api/v1/workers/${id}`, { as: w })).status).toBe(204);
    });

    it('tells the worker to stop a task whose run was cancelled', async () => {
      await publish('cancel', { with: { taskType: 'resize' } });
      const w = await mint('default');
      const id = await register(w, {});
      const runId = await start('cancel');
      const t = await take(w, id);
      expect((await app.request('POST', `/api/v1/runs/${runId}/cancel`, { as, body: {} })).status).toBeLessThan(300);
      const cancel = await until('the cancel', async () => {
        const hb = await app.request('POST', `/api/v1/workers/${id}/heartbeat`, { as: w, body: {} });
        return (hb.body.cancel as { attemptId: string }[]).find((c) => c.attemptId === t.attemptId);
      });
      expect(cancel).toMatchObject({ attemptId: t.attemptId, reason: 'cancelled' });
      const late = await result(w, id, t, { status: 'succeeded', outputs: { width: 1 } });
      expect(late.body.error.code).toBe('TASK_CANCELLED');
    });
  });

  describe('deliveries lost on the way', () => {
    const sync = (w: As, id: string, body: unknown) =>
      app.request('POST', `/api/v1/workers/${id}/tasks/sync`, { as: w, body });

    it("closes the worker's channel on its own sync over HTTP, never on another tenant's or pool's", async () => {
      await publish('lost-sync-chan', { with: { taskType: 'resize' } });
      const w = await mint('default');
      const id = await register(w, {});
      const c = await channel(w, id);
      // Another tenant's and another pool's worker tokens name this worker: 404, the channel stays.
      const b = await app.tenant(`ws-${process.pid}`);
      const foreign = await mint('default', b);
      await register(foreign, {});
      const otherPool = await mint('other-pool');
      expect((await sync(foreign, id, { holding: [] })).status).toBe(404);
      expect((await sync(otherPool, id, { holding: [] })).status).toBe(404);
      c.ws.send(JSON.stringify({ type: 'ready', credit: 1 }));
      const runId = await start('lost-sync-chan');
      const offer = await firstOffer(c);
      expect(offer.runId).toBe(runId);
      expect(c.ws.readyState).toBe(WebSocket.OPEN);
      // The worker's own sync (it pulls by long-poll now) closes the channel, and the offer comes to
      // its pull.
      expect((await sync(w, id, { holding: [] })).status).toBe(200);
      expect(await c.closed).toBe(4410);
      expect(await take(w, id)).toMatchObject({ attemptId: offer.attemptId, epoch: offer.epoch, runId });
    });

    it('delivers again, at the same attempt and epoch, a task the worker says it does not hold', async () => {
      await publish('lost', { with: { taskType: 'resize' } });
      const w = await mint('default');
      const id = await register(w, {});
      const runId = await start('lost');
      const t = await take(w, id);
      // Bad bodies, another pool's worker token, an unknown worker: refused, and the task stays delivered.
      for (const body of [{}, { holding: 'x' }, { holding: ['not-a-uuid'] }, { holding: [], extra: 1 }]) {
        const r = await sync(w, id, body);
        expect([r.status, r.body.error.code]).toEqual([400, 'VALIDATION_FAILED']);
      }
      const tooMany = await sync(w, id, { holding: Array.from({ length: 10_001 }, () => t.attemptId) });
      expect(tooMany.status).toBe(400);
      const other = await mint('other-pool');
      expect((await sync(other, id, { holding: [] })).status).toBe(404);
      expect((await sync(w, '00000000-0000-4000-8000-000000000000', { holding: [] })).status).toBe(404);
      expect(work(await run(runId)).task?.status).toBe('delivered');

      expect((await sync(w, id, { holding: [t.attemptId] })).body).toEqual({ redelivered: [] });
      expect((await next(w, id, 300)).status).toBe(204);
      const r = await sync(w, id, { holding: [] });
      expect([r.status, r.body]).toEqual([200, { redelivered: [t.attemptId] }]);
      const again = await take(w, id);
      expect(again).toMatchObject({ attemptId: t.attemptId, epoch: t.epoch, runId });
      expect((await result(w, id, again, { status: 'succeeded', outputs: { width: 2 } })).body).toEqual({
        outcome: 'succeeded',
        duplicate: false,
      });
      expect((await waitForRun(app, as, runId)).status).toBe('succeeded');
      expect(work(await run(runId)).attempts).toBe(1);
      expect((await sync(w, id, { holding: [] })).body).toEqual({ redelivered: [] });
    });

    it('on the channel, a sync sent before the credit gets the lost task offered again', async () => {
      await publish('lost-chan', { with: { taskType: 'resize' } });
      const w = await mint('default');
      const id = await register(w, {});
      const runId = await start('lost-chan');
      const t = await take(w, id);
      const { ws, inbox } = await channel(w, id);
      ws.send(JSON.stringify({ type: 'sync', holding: ['nope'] }));
      const bad = await until('the error', async () => inbox.find((m) => m.type === 'error'));
      expect(bad).toMatchObject({ code: 'BAD_MESSAGE' });
      ws.send(JSON.stringify({ type: 'sync', holding: [] }));
      ws.send(JSON.stringify({ type: 'ready', credit: 1 }));
      const offer = await until('the offer', async () => inbox.find((m) => m.type === 'task'));
      expect(inbox.find((m) => m.type === 'sync')).toEqual({ type: 'sync', redelivered: [t.attemptId] });
      expect(offer.task).toMatchObject({ attemptId: t.attemptId, epoch: t.epoch, runId });
      ws.close();
    });

    it('gives a draining worker’s lost task back to the pool, where another worker takes it', async () => {
      await publish('lost-drain', { with: { taskType: 'resize' } });
      const w = await mint('default');
      const id = await register(w, {});
      const runId = await start('lost-drain');
      const t = await take(w, id);
      expect((await app.request('POST', `/api/v1/workers/${id}/drain`, { as: w })).status).toBe(200);
      expect((await sync(w, id, { holding: [] })).body).toEqual({ redelivered: [t.attemptId] });
      const id2 = await register(w, {});
      const t2 = await take(w, id2);
      expect(t2).toMatchObject({ attemptId: t.attemptId, epoch: t.epoch });
      expect((await result(w, id2, t2, { status: 'succeeded', outputs: { width: 3 } })).status).toBe(200);
      expect((await waitForRun(app, as, runId)).status).toBe('succeeded');
      // The draining worker's own copy of the task is no longer its: its result is refused.
      expect((await result(w, id, t, { status: 'succeeded', outputs: { width: 3 } })).body.error.code).toBe(
        'TASK_NOT_FOUND',
      );
    });
  });

  describe('progress and the channel', () => {
    it('records progress on the step and as a run event', async () => {
      await publish('prog', { with: { taskType: 'resize' } });
      const w = await mint('default');
      const id = await register(w, {});
      const runId = await start('prog');
      const t = await take(w, id);
      const p = await app.request('POST', `/api/v1/workers/${id}/tasks/${t.attemptId}/progress`, {
        as: w,
        body: { epoch: t.epoch, percent: 40, message: 'resizing' },
      });
      expect(p.status).toBe(202);
      expect(work(await run(runId)).task?.progress).toMatchObject({ percent: 40, message: 'resizing' });
      const ev = (await runEvents(app, as, runId)).find((e) => e.type === 'step.progress');
      expect(ev?.data).toMatchObject({ percent: 40 });
    });

    it('offers tasks over the WebSocket channel and takes results on it', async () => {
      await publish('chan', { with: { taskType: 'resize' } });
      const w = await mint('default');
      const id = await register(w, {});
      const { ws, inbox } = await channel(w, id);
      ws.send(JSON.stringify({ type: 'ready', credit: 2 }));
      const runId = await start('chan');
      const offer = await until('the offer', async () => inbox.find((m) => m.type === 'task'));
      const task = offer.task as Task;
      expect(task.runId).toBe(runId);
      ws.send(
        JSON.stringify({
          type: 'result',
          attemptId: task.attemptId,
          epoch: task.epoch,
          status: 'succeeded',
          outputs: { width: 5 },
        }),
      );
      const ack = await until('the ack', async () => inbox.find((m) => m.type === 'ack'));
      expect(ack).toMatchObject({ attemptId: task.attemptId, outcome: 'succeeded' });
      expect((await waitForRun(app, as, runId)).status).toBe('succeeded');
      ws.close();
    });

    it("replaces a worker's channel with its newer one: the older is closed (4410) and tasks go to the newer", async () => {
      await publish('chan-replaced', { with: { taskType: 'resize' } });
      const w = await mint('default');
      const id = await register(w, {});
      const first = await channel(w, id);
      first.ws.send(JSON.stringify({ type: 'ready', credit: 1 }));
      const second = await channel(w, id);
      expect(await first.closed).toBe(4410);
      second.ws.send(JSON.stringify({ type: 'ready', credit: 1 }));
      const runId = await start('chan-replaced');
      expect((await firstOffer(second)).runId).toBe(runId);
      expect(offeredTasks(first)).toEqual([]);
      second.ws.close();
    });

    it('gives a task delivered to a channel that closed meanwhile back to its worker: its next channel gets it', async () => {
      await publish('chan-gone', { with: { taskType: 'resize' } });
      const w = await mint('default');
      const id = await register(w, {});
      const first = await channel(w, id);
      const runId = await start('chan-gone');
      await until('the task assigned to the worker', async () =>
        work(await run(runId)).task?.status === 'assigned' ? true : undefined,
      );
      const owner = new pg.Client({ connectionString: app.testDb.ownerUrl });
      await owner.connect();
      try {
        // The tasks table is locked: the channel's delivery waits for it while the channel closes.
        await owner.query('begin');
        await owner.query('lock table worker_task in exclusive mode');
        first.ws.send(JSON.stringify({ type: 'ready', credit: 1 }));
        await lockWaited(owner, 'the delivery waiting', 'delivered_at = clock_timestamp()');
        first.ws.close();
        await first.closed;
        await owner.query('commit');
      } finally {
        await owner.end();
      }
      // A client that does not sync gets the task on its next channel all the same.
      const second = await channel(w, id);
      second.ws.send(JSON.stringify({ type: 'ready', credit: 1 }));
      expect(await firstOffer(second)).toMatchObject({ runId, attempt: 1 });
      expect(offeredTasks(first)).toEqual([]);
      second.ws.close();
    });

    it('pushes a cancel on the channel when the run of an offered task is cancelled', async () => {
      await publish('chan-cancel', { with: { taskType: 'resize' } });
      const w = await mint('default');
      const id = await register(w, {});
      const { ws, inbox } = await channel(w, id);
      ws.send(JSON.stringify({ type: 'ready', credit: 1 }));
      const runId = await start('chan-cancel');
      const offer = await until('the offer', async () => inbox.find((m) => m.type === 'task'));
      expect((await app.request('POST', `/api/v1/runs/${runId}/cancel`, { as, body: {} })).status).toBeLessThan(300);
      const cancel = await until('the cancel', async () => inbox.find((m) => m.type === 'cancel'));
      expect(cancel).toMatchObject({ attemptId: (offer.task as Task).attemptId, reason: 'cancelled' });
      ws.close();
    });

    it('takes a worker whose channel stays open but answers no ping for offline, and orphans its task', async () => {
      await publish('chan-hung', { with: { taskType: 'resize' } });
      const w = await mint('default');
      const id = await register(w, {}, { quiet: true });
      // A hung worker: its socket stays open, it sends nothing and answers no ping.
      const { ws, inbox, closed } = await channel(w, id, { autoPong: false });
      ws.send(JSON.stringify({ type: 'ready', credit: 1 }));
      const runId = await start('chan-hung');
      await until('the offer', async () => inbox.find((m) => m.type === 'task'));
      await until('the worker offline', async () => {
        const r = (await app.request('GET', `/api/v1/workers/${id}`, { as })).body as { status: string };
        return r.status === 'offline' ? true : undefined;
      });
      expect(await closed).toBe(4409);
      await until('the orphaned task', async () =>
        work(await run(runId)).task?.status === 'orphaned' ? true : undefined,
      );
    });

    it("refuses on the channel what the routes refuse (NUL, 1e309, a non-object), and another worker's heartbeats go on", async () => {
      const w = await mint('default');
      const id = await register(w, {}, { quiet: true });
      const c = await channel(w, id);
      const other = await mint('default');
      const otherId = await register(other, {}, { quiet: true });
      c.ws.send('{"type":"heartbeat","loaded":["\\u0000"]}');
      c.ws.send('{"type":"progress","attemptId":"00000000-0000-4000-8000-000000000000","epoch":1,"percent":1e309}');
      c.ws.send('null');
      const errors = await until('three answers', async () => {
        const e = c.inbox.filter((m) => m.type === 'error');
        return e.length === 3 ? e : undefined;
      });
      expect(errors.map((e) => e.code)).toEqual(['BAD_MESSAGE', 'BAD_MESSAGE', 'BAD_MESSAGE']);
      expect(String(errors[0].message)).toMatch(/NUL/);
      // The heartbeats recorded after it, this worker's and another's, are kept.
      for (let i = 0; i < 3; i++) {
        expect(
          (await app.request('POST', `/api/v1/workers/${otherId}/heartbeat`, { as: other, body: {} })).status,
        ).toBe(200);
        await new Promise((r) => setTimeout(r, 400));
      }
      c.ws.send('{"type":"heartbeat"}');
      await until('the heartbeat answer', async () => c.inbox.find((m) => m.type === 'heartbeat'));
      const seen = (await app.request('GET', `/api/v1/workers/${otherId}`, { as })).body as { status: string };
      expect(seen.status).toBe('online');
      c.ws.close();
    });

    it('refuses a channel upgrade without a worker token', async () => {
      const w = await mint('default');
      const id = await register(w, {});
      const code = await upgradeStatus(app.url, as, id);
      expect(code).toBe(403);
    });

    it('refuses a channel upgrade in the error envelope: a malformed worker id is 400 VALIDATION_FAILED, as on the REST routes', async () => {
      const w = await mint('default');
      const headers = { authorization: `Bearer ${w.token}`, 'x-tenant-id': w.tenantId };
      const base = app.url.replace('http', 'ws');
      const rest = await app.request('POST', '/api/v1/workers/not-a-uuid/heartbeat', { as: w, body: {} });
      for (const id of ['not-a-uuid', '1e3', encodeURIComponent('💥')]) {
        const r = await refusal(`${base}/api/v1/workers/${id}/channel`, headers);
        expect([r.status, r.contentType]).toEqual([400, 'application/json']);
        const e = errorEnvelopeSchema.parse(r.body).error;
        expect([e.code, e.message]).toEqual([rest.body.error.code, rest.body.error.message]);
        expect(e.traceId).toMatch(/^[0-9a-f]{32}$/);
      }
      // Credentials are checked first, as on the REST routes.
      const anon = await refusal(`${base}/api/v1/workers/not-a-uuid/channel`);
      expect([anon.status, errorEnvelopeSchema.parse(anon.body).error.code]).toEqual([401, 'UNAUTHENTICATED']);
    });
  });
});
