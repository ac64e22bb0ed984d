import pino from 'pino';
import WebSocket from 'ws';
import { startOrdo, type RunningOrdo } from '../../src/ordo';
import { cutListeners } from '../support/listeners';
import { startTestApp, type TestApp } from '../support/test-app';
import { waitForRun } from './runs-support';
import { offeredTasks, openChannel, type WorkerAs } from './worker-channel-support';
import { until } from './workers-sdk-support';

const CLOSE_REPLACED = 4410;

/**
 * A worker's channel across two api replicas on one database: a worker has one channel, the newest
 * opened in any replica. The replica holding an older one closes it (4410) as soon as the newer
 * opens, and the tasks it offered on it that were not answered are offered on the newer one, so a
 * task sent into a socket the older replica still took for open does not wait for its deadline.
 */
describe('worker channels across api replicas', () => {
  let a: TestApp;
  let b: RunningOrdo;
  let as: { token: string; tenantId: string };
  let seq = 0;

  beforeAll(async () => {
    a = await startTestApp({ ORDO_ROLES: 'api,worker,scheduler' });
    b = await startOrdo({ ...a.config, ORDO_ROLES: ['api'] }, pino({ level: 'silent' }), {
      appUrl: a.testDb.appUrl,
      systemUrl: a.testDb.systemUrl,
      ownerUrl: a.testDb.ownerUrl,
    });
    as = { token: a.adminToken, tenantId: a.tenantId };
  });
  afterAll(async () => {
    await b?.close();
    await a?.close();
  });

  /** A worker alone in its pool `pool`. */
  const worker = async (pool: string): Promise<{ w: WorkerAs; id: string }> => {
    const t = await a.request('POST', '/api/v1/tokens', {
      as,
      body: { scopes: ['worker'], pool, subject: `w-${++seq}` },
    });
    expect(t.status).toBe(201);
    const w = { token: t.body.token as string, tenantId: as.tenantId };
    const r = await a.request('POST', '/api/v1/workers', {
      as: w,
      body: { name: `replica-worker-${++seq}`, taskTypes: [{ name: 'resize' }] },
    });
    expect(r.status).toBe(201);
    return { w, id: r.body.workerId as string };
  };
  /** A worker's call to replica B. */
  const onB = async (
    method: string,
    path: string,
    w: WorkerAs,
    body?: unknown,
  ): Promise<{ status: number; body: any }> => {
    const res = await fetch(`${b.url}${path}`, {
      method,
      headers: {
        authorization: `Bearer ${w.token}`,
        'x-tenant-id': w.tenantId,
        ...(body !== undefined ? { 'content-type': 'application/json' } : {}),
      },
      body: body !== undefined ? JSON.stringify(body) : undefined,
    });
    const text = await res.text();
    return { status: res.status, body: text ? JSON.parse(text) : undefined };
  };
  const start = async (dagId: string) => {
    const r = await a.request('POST', '/api/v1/runs', {
      as,
      body: { dagId, inputs: {}, runToken: `${dagId}-${++seq}` },
    });
    expect(r.status).toBe(201);
    return r.body.runId as string;
  };
  /** A DAG of one queue step, its task for pool `id`. */
  const publish = async (id: string) => {
    const r = await a.request('POST', '/api/v1/dags', {
      as,
      body: { id, steps: [{ id: 'work', plugin: 'queue', with: { taskType: 'resize', pool: id } }] },
    });
    expect(r.status).toBe(201);
  };

  /** A worker alone in pool `name`, its channel open on A, and its run's task offered there. */
  const offeredOnA = async (name: string) => {
    await publish(name);
    const { w, id } = await worker(name);
    const older = await openChannel(a.url, w, id);
    older.ws.send(JSON.stringify({ type: 'ready', credit: 1 }));
    const runId = await start(name);
    const offered = await until('the offer on A', async () => offeredTasks(older)[0]);
    expect(offered.runId).toBe(runId);
    return { w, id, older, runId, offered };
  };

  it('closes the older channel on the other replica (4410) and offers its unanswered task on the newer one', async () => {
    const { w, id, older, runId, offered } = await offeredOnA('replica-moved');

    // The worker comes back on replica B without saying what it holds (no sync): the task offered
    // on A and never answered comes to it there, the same attempt at the same epoch.
    const newer = await openChannel(b.url, w, id);
    expect(await older.closed).toBe(CLOSE_REPLACED);
    newer.ws.send(JSON.stringify({ type: 'ready', credit: 1 }));
    const again = await until('the offer on the newer channel', async () => offeredTasks(newer)[0]);
    expect(again).toMatchObject({ attemptId: offered.attemptId, epoch: offered.epoch, runId });

    newer.ws.send(
      JSON.stringify({
        type: 'result',
        attemptId: again.attemptId,
        epoch: again.epoch,
        status: 'succeeded',
        outputs: {},
      }),
    );
    const ack = await until('the ack', async () => newer.inbox.find((m) => m.type === 'ack'));
    expect(ack).toMatchObject({ attemptId: offered.attemptId, outcome: 'succeeded', duplicate: false });
    expect((await waitForRun(a, as, runId)).status).toBe('succeeded');
    expect(newer.ws.readyState).toBe(WebSocket.OPEN);
    newer.ws.close();
  });

  it('keeps the newest channel whichever replica it opened on: back on A, the one on B is closed', async () => {
    await publish('replica-back');
    const { w, id } = await worker('replica-back');
    const first = await openChannel(a.url, w, id);
    const second = await openChannel(b.url, w, id);
    expect(await first.closed).toBe(CLOSE_REPLACED);
    const third = await openChannel(a.url, w, id);
    expect(await second.closed).toBe(CLOSE_REPLACED);

    // The third is the worker's channel: it stays open and is offered the next task.
    third.ws.send(JSON.stringify({ type: 'ready', credit: 1 }));
    const runId = await start('replica-back');
    const offer = await until('the offer on the newest channel', async () => offeredTasks(third)[0]);
    expect(offer.runId).toBe(runId);
    expect(third.ws.readyState).toBe(WebSocket.OPEN);
    expect(offeredTasks(first).concat(offeredTasks(second))).toEqual([]);
    third.ws.close();
  });

  it('closes the channel on A when the worker syncs over HTTP on B, and its unanswered task comes to the long-poll', async () => {
    const { w, id, older, runId, offered } = await offeredOnA('replica-polls');

    // The worker fell back to long-poll on B: its sync says it holds nothing (the offer went into a
    // socket it lost), and A's channel, which A still takes for open, is closed.
    const sync = await onB('POST', `/api/v1/workers/${id}/tasks/sync`, w, { holding: [] });
    expect(sync.status).toBe(200);
    expect(await older.closed).toBe(CLOSE_REPLACED);
    const pulled = await onB('GET', `/api/v1/workers/${id}/tasks/next?waitMs=5000`, w);
    expect(pulled.status).toBe(200);
    expect(pulled.body.tasks).toEqual([
      expect.objectContaining({ attemptId: offered.attemptId, epoch: offered.epoch, runId }),
    ]);
    const result = await onB('POST', `/api/v1/workers/${id}/tasks/${offered.attemptId}/result`, w, {
      epoch: offered.epoch,
      status: 'succeeded',
      outputs: {},
    });
    expect(result.body).toMatchObject({ outcome: 'succeeded', duplicate: false });
    expect((await waitForRun(a, as, runId)).status).toBe('succeeded');
  });

  it('closes an older channel once its replica listens again, when the newer one opened while it did not', async () => {
    await publish('replica-deaf');
    const { w, id } = await worker('replica-deaf');
    const older = await openChannel(a.url, w, id);
    // Both replicas' listening connections end, and the newer channel opens on B before they
    // listen again (after a backoff): A never hears its announcement.
    const cut = await cutListeners(a.testDb.ownerUrl, 'ordo:workers-listen', () => openChannel(b.url, w, id));
    expect(cut).toMatchObject({ before: 2, after: 2 });
    const newer = cut.result;
    expect(await older.closed).toBe(CLOSE_REPLACED);
    expect(newer.ws.readyState).toBe(WebSocket.OPEN);
    newer.ws.close();
  });
});
