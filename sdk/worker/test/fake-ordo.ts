import { randomUUID } from 'node:crypto';
import http from 'node:http';
import type net from 'node:net';
import { WebSocketServer, type WebSocket } from 'ws';
import type { ClientMessage, HeartbeatAnswer, RegisterRequest, ResultBody, ResultsBody, Task } from '../src/protocol';

/**
 * An in-memory stand-in for the worker routes of an Ordo server, for the SDK's unit tests: it
 * speaks the protocol of docs/workers.md (registration, heartbeats, long-poll, the channel with
 * credit, results with their 409s) and lets a test enqueue tasks, cancel them, forget a worker or
 * answer with errors.
 */
export interface FakeWorker {
  id: string;
  request: RegisterRequest;
  status: 'online' | 'draining' | 'offline';
  deleted: boolean;
  socket?: WebSocket;
  credit: number;
  heartbeats: number;
  pendingCancels: { attemptId: string; reason: string }[];
}

interface Offered {
  task: Task;
  workerId: string;
  cancelled: boolean;
}

interface Waiter<T> {
  match: (x: T) => boolean;
  resolve: (x: T) => void;
}

export interface LoggedRequest {
  method: string;
  path: string;
  headers: http.IncomingHttpHeaders;
  body: unknown;
}

export class FakeOrdo {
  readonly workers = new Map<string, FakeWorker>();
  readonly results = new Map<string, { body: ResultBody; workerId: string; via: 'http' | 'websocket' }>();
  readonly progress: { attemptId: string; body: unknown }[] = [];
  readonly requests: LoggedRequest[] = [];
  readonly queue: Task[] = [];
  readonly offered = new Map<string, Offered>();
  /** Answers the next requests whose path matches with this status (and an error envelope). */
  readonly failures: { path: RegExp; status: number; code: string; times: number }[] = [];
  /** Leaves heartbeats sent on the channel unanswered (a connection that looks open but carries nothing back). */
  muteChannelHeartbeats = false;
  /** Channel connections opened so far. */
  channels = 0;
  /** Answers the channel upgrade with 404 (a server without the channel). */
  refuseChannel = false;
  /** Answers this many more channel upgrades with 503 (a server that cannot open it for now). */
  channelUnavailable = 0;
  /** Holds the acks of results taken on the channel until `releaseAcks`. */
  holdAcks = false;
  /** Offers of tasks this many times more are lost on the way (counted as delivered, never sent). */
  loseOffers = 0;
  /** Long-poll answers with tasks this many times more are lost (the connection dropped instead). */
  losePolls = 0;
  /** The syncs received: who sent them, how, and what they held. */
  readonly syncs: { workerId: string; holding: string[]; via: 'http' | 'websocket' }[] = [];
  private readonly heldAcks: (() => void)[] = [];
  token = 'worker-token';
  tenantId = 'acme';
  heartbeatIntervalMs = 40;
  longPollMs = 300;
  private polls: { workerId: string; max: number; resolve: (tasks: Task[] | undefined) => void }[] = [];
  private resultWaiters: Waiter<string>[] = [];
  private registerWaiters: Waiter<FakeWorker>[] = [];
  private readonly server = http.createServer((req, res) => void this.serve(req, res));
  private readonly wss = new WebSocketServer({ noServer: true });
  private readonly sockets = new Set<net.Socket>();
  url = '';

  async listen(): Promise<this> {
    this.server.on('connection', (s) => {
      this.sockets.add(s);
      s.on('close', () => this.sockets.delete(s));
    });
    this.server.on('upgrade', (req, socket, head) => this.upgrade(req, socket as net.Socket, head));
    await new Promise<void>((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    this.url = `http://127.0.0.1:${(this.server.address() as net.AddressInfo).port}`;
    return this;
  }

  async close(): Promise<void> {
    for (const p of this.polls) p.resolve(undefined);
    for (const w of this.workers.values()) w.socket?.terminate();
    for (const s of this.sockets) s.destroy();
    this.wss.close();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  /** Queues a task of the type and hands it to a worker that can take it. */
  enqueue(taskType: string, inputs: Record<string, unknown> = {}, extra: Partial<Task> = {}): Task {
    const task: Task = {
      attemptId: randomUUID(),
      runId: randomUUID(),
      stepId: 'step',
      attempt: 1,
      epoch: 1,
      taskType,
      inputs: inputs as Task['inputs'],
      deadline: new Date(Date.now() + 60_000).toISOString(),
      traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01',
      dagId: 'dag',
      dagVersion: 1,
      ...extra,
    };
    this.queue.push(task);
    this.dispatch();
    return task;
  }

  /** Cancels a task: on the channel at once when the worker has one, else in its next heartbeat answer. */
  cancel(attemptId: string, reason = 'run cancelled'): void {
    const o = this.offered.get(attemptId);
    if (!o) throw new Error(`task ${attemptId} was not offered`);
    o.cancelled = true;
    const w = this.workers.get(o.workerId)!;
    if (w.socket) w.socket.send(JSON.stringify({ type: 'cancel', attemptId, reason }));
    else w.pendingCancels.push({ attemptId, reason });
  }

  /**
   * Marks a worker offline, as after its TTL: its heartbeats answer offline, its channel closes with
   * 4409, the long-poll, drain and a new channel answer 409 WORKER_OFFLINE.
   */
  expire(workerId: string): void {
    const w = this.workers.get(workerId)!;
    w.status = 'offline';
    w.socket?.close(4409, 'the worker is offline: register again');
    for (const p of this.polls.filter((x) => x.workerId === workerId)) p.resolve(undefined);
  }

  /** Offers a task offered already once more, first (as a server gives back a replaced channel's tasks). */
  reoffer(attemptId: string): void {
    const o = this.offered.get(attemptId);
    if (!o) throw new Error(`task ${attemptId} was not offered`);
    this.offered.delete(attemptId);
    this.queue.unshift(o.task);
    this.dispatch();
  }

  /** Drops a worker's channel connection without a close handshake. */
  dropChannel(workerId: string): void {
    this.workers.get(workerId)?.socket?.terminate();
  }

  failNext(path: RegExp, status: number, code: string, times = 1): void {
    this.failures.push({ path, status, code, times });
  }

  waitForResult(attemptId: string): Promise<string> {
    if (this.results.has(attemptId)) return Promise.resolve(attemptId);
    return new Promise((resolve) => this.resultWaiters.push({ match: (id) => id === attemptId, resolve }));
  }

  /** Resolves with the n-th registration (1 for the first). */
  waitForRegistration(n: number): Promise<FakeWorker> {
    const all = [...this.workers.values()];
    if (all.length >= n) return Promise.resolve(all[n - 1]);
    return new Promise((resolve) =>
      this.registerWaiters.push({
        match: () => this.workers.size >= n,
        resolve: () => resolve([...this.workers.values()][n - 1]),
      }),
    );
  }

  private dispatch(): void {
    while (this.queue.length > 0) {
      const task = this.queue[0];
      const ws = [...this.workers.values()].find(
        (w) => w.status === 'online' && w.socket && w.credit > 0 && handles(w, task),
      );
      if (ws) {
        this.queue.shift();
        ws.credit--;
        this.offered.set(task.attemptId, { task, workerId: ws.id, cancelled: false });
        if (this.loseOffers > 0) this.loseOffers--;
        else ws.socket!.send(JSON.stringify({ type: 'task', task }));
        continue;
      }
      const poll = this.polls.find((p) => {
        const w = this.workers.get(p.workerId)!;
        return w.status === 'online' && handles(w, task);
      });
      if (!poll) return;
      this.polls = this.polls.filter((p) => p !== poll);
      const w = this.workers.get(poll.workerId)!;
      const taken: Task[] = [];
      while (taken.length < poll.max) {
        const i = this.queue.findIndex((t) => handles(w, t));
        if (i < 0) break;
        const [t] = this.queue.splice(i, 1);
        this.offered.set(t.attemptId, { task: t, workerId: w.id, cancelled: false });
        taken.push(t);
      }
      poll.resolve(taken);
    }
  }

  private authorized(headers: http.IncomingHttpHeaders): boolean {
    return headers.authorization === `Bearer ${this.token}` && headers['x-tenant-id'] === this.tenantId;
  }

  private upgrade(req: http.IncomingMessage, socket: net.Socket, head: Buffer): void {
    const m = /^\/api\/v1\/workers\/([^/]+)\/channel$/.exec(req.url ?? '');
    const w = m ? this.workers.get(m[1]) : undefined;
    const refuse = (status: number, code: string) => {
      const body = JSON.stringify({ error: { code, message: code, traceId: 't' } });
      socket.end(
        `HTTP/1.1 ${status} X\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\n\r\n${body}`,
      );
    };
    if (!this.authorized(req.headers)) return refuse(401, 'UNAUTHENTICATED');
    if (this.refuseChannel || !m) return refuse(404, 'NOT_FOUND');
    if (this.channelUnavailable > 0) {
      this.channelUnavailable--;
      return refuse(503, 'UNAVAILABLE');
    }
    if (!w || w.deleted) return refuse(404, 'WORKER_NOT_FOUND');
    if (w.status === 'offline') return refuse(409, 'WORKER_OFFLINE');
    this.wss.handleUpgrade(req, socket, head, (ws) => {
      this.channels++;
      w.socket = ws;
      w.credit = 0;
      ws.on('close', () => {
        if (w.socket === ws) {
          w.socket = undefined;
          w.credit = 0;
        }
      });
      ws.on('message', (data: Buffer) => this.onMessage(w, ws, JSON.parse(data.toString('utf8')) as ClientMessage));
    });
  }

  /** Sends the acks held so far (see holdAcks) and stops holding them. */
  releaseAcks(): void {
    this.holdAcks = false;
    for (const answer of this.heldAcks.splice(0)) answer();
  }

  private onMessage(w: FakeWorker, ws: WebSocket, msg: ClientMessage): void {
    switch (msg.type) {
      case 'ready':
        w.credit += msg.credit;
        this.dispatch();
        break;
      case 'heartbeat':
        if (this.muteChannelHeartbeats) break;
        ws.send(JSON.stringify({ type: 'heartbeat', ...this.heartbeat(w) }));
        break;
      case 'sync':
        ws.send(JSON.stringify({ type: 'sync', ...this.sync(w, msg.holding, 'websocket') }));
        break;
      case 'progress': {
        const { type: _t, attemptId, ...body } = msg;
        this.progress.push({ attemptId, body });
        break;
      }
      case 'result': {
        const { type: _t, attemptId, ...body } = msg;
        const r = this.result(w, attemptId, body, 'websocket');
        const answer = () => {
          if (r.status === 200) ws.send(JSON.stringify({ type: 'ack', attemptId, ...r.body }));
          else ws.send(JSON.stringify({ type: 'error', attemptId, code: r.code, message: r.code }));
        };
        if (this.holdAcks) this.heldAcks.push(answer);
        else answer();
        break;
      }
    }
  }

  /** Tasks offered to the worker, without a result, that it does not hold: queued again (first). */
  private sync(w: FakeWorker, holding: string[], via: 'http' | 'websocket'): { redelivered: string[] } {
    this.syncs.push({ workerId: w.id, holding, via });
    const lost = [...this.offered.values()].filter(
      (o) =>
        o.workerId === w.id &&
        !o.cancelled &&
        !this.results.has(o.task.attemptId) &&
        !holding.includes(o.task.attemptId),
    );
    for (const o of lost) this.offered.delete(o.task.attemptId);
    this.queue.unshift(...lost.map((o) => o.task));
    setImmediate(() => this.dispatch());
    return { redelivered: lost.map((o) => o.task.attemptId) };
  }

  private heartbeat(w: FakeWorker): HeartbeatAnswer {
    w.heartbeats++;
    const cancel = w.pendingCancels.splice(0);
    return { status: w.status, ttlMs: 1_000, cancel };
  }

  private result(
    w: FakeWorker,
    attemptId: string,
    body: ResultBody,
    via: 'http' | 'websocket',
  ): { status: number; code?: string; body?: object } {
    const o = this.offered.get(attemptId);
    if (!o || o.workerId !== w.id) return { status: 404, code: 'TASK_NOT_FOUND' };
    if (o.cancelled) return { status: 409, code: 'TASK_CANCELLED' };
    if (w.status === 'offline') return { status: 409, code: 'TASK_ORPHANED' };
    if (body.epoch !== o.task.epoch) return { status: 409, code: 'STALE_EPOCH' };
    const prior = this.results.get(attemptId);
    if (prior) {
      if (JSON.stringify(prior.body) !== JSON.stringify(body)) return { status: 409, code: 'RESULT_CONFLICT' };
      return { status: 200, body: { outcome: body.status, duplicate: true } };
    }
    this.results.set(attemptId, { body, workerId: w.id, via });
    for (const x of this.resultWaiters.filter((y) => y.match(attemptId))) x.resolve(attemptId);
    return { status: 200, body: { outcome: body.status, duplicate: false } };
  }

  private async serve(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    let text = '';
    for await (const chunk of req) text += (chunk as Buffer).toString('utf8');
    const body: unknown = text ? JSON.parse(text) : undefined;
    const url = new URL(req.url ?? '/', 'http://x');
    this.requests.push({ method: req.method ?? '', path: url.pathname, headers: req.headers, body });
    const send = (status: number, payload?: unknown) => {
      if (res.destroyed) return;
      res.writeHead(status, payload === undefined ? {} : { 'content-type': 'application/json' });
      res.end(payload === undefined ? undefined : JSON.stringify(payload));
    };
    const fail = (status: number, code: string) => send(status, { error: { code, message: code, traceId: 't' } });
    const injected = this.failures.find((f) => f.times > 0 && f.path.test(url.pathname));
    if (injected) {
      injected.times--;
      return fail(injected.status, injected.code);
    }
    if (!this.authorized(req.headers)) return fail(401, 'UNAUTHENTICATED');

    if (req.method === 'POST' && url.pathname === '/api/v1/workers') {
      const w: FakeWorker = {
        id: randomUUID(),
        request: body as RegisterRequest,
        status: 'online',
        deleted: false,
        credit: 0,
        heartbeats: 0,
        pendingCancels: [],
      };
      this.workers.set(w.id, w);
      for (const x of this.registerWaiters.filter((y) => y.match(w))) x.resolve(w);
      return send(201, {
        workerId: w.id,
        pool: w.request.pool ?? 'default',
        ttlMs: 1_000,
        heartbeatIntervalMs: this.heartbeatIntervalMs,
        longPollMs: this.longPollMs,
      });
    }
    const m = /^\/api\/v1\/workers\/([^/]+)(\/.*)?$/.exec(url.pathname);
    const w = m ? this.workers.get(m[1]) : undefined;
    const rest = m?.[2] ?? '';
    if (!w || w.deleted) return fail(404, 'WORKER_NOT_FOUND');
    if (req.method === 'POST' && rest === '/heartbeat') return send(200, this.heartbeat(w));
    if (req.method === 'DELETE' && rest === '') {
      w.deleted = true;
      return send(204);
    }
    const live = w.status !== 'offline';
    if (req.method === 'POST' && rest === '/drain') {
      if (!live) return fail(409, 'WORKER_OFFLINE');
      w.status = 'draining';
      return send(200, { status: 'draining' });
    }
    if (req.method === 'GET' && rest === '/tasks/next') {
      if (!live) return fail(409, 'WORKER_OFFLINE');
      const max = Number(url.searchParams.get('max') ?? '1');
      const waitMs = Number(url.searchParams.get('waitMs') ?? '25000');
      const tasks = await new Promise<Task[] | undefined>((resolve) => {
        const timer = setTimeout(() => {
          this.polls = this.polls.filter((p) => p.resolve !== done);
          resolve(undefined);
        }, waitMs);
        const done = (t: Task[] | undefined) => {
          clearTimeout(timer);
          resolve(t);
        };
        this.polls.push({ workerId: w.id, max, resolve: done });
        res.on('close', () => {
          // The client gave up the poll: tasks handed to it meanwhile go back to the queue.
          if (!res.writableFinished) this.polls = this.polls.filter((p) => p.resolve !== done);
        });
        this.dispatch();
      });
      if (tasks && tasks.length > 0 && this.losePolls > 0) {
        this.losePolls--;
        res.destroy();
        return;
      }
      if (tasks && tasks.length > 0) return send(200, { tasks });
      return send(204);
    }
    if (req.method === 'POST' && rest === '/tasks/sync') {
      if (!live) return fail(409, 'WORKER_OFFLINE');
      return send(200, this.sync(w, (body as { holding: string[] }).holding, 'http'));
    }
    if (req.method === 'POST' && rest === '/tasks/results') {
      const results = (body as ResultsBody).results.map(({ attemptId, ...one }) => {
        const r = this.result(w, attemptId, one, 'http');
        return r.status === 200
          ? { attemptId, answer: r.body }
          : { attemptId, refused: { status: r.status, code: r.code!, message: r.code! } };
      });
      return send(200, { results });
    }
    const t = /^\/tasks\/([^/]+)\/(result|progress)$/.exec(rest);
    if (req.method === 'POST' && t) {
      if (t[2] === 'progress') {
        this.progress.push({ attemptId: t[1], body });
        return send(202);
      }
      const r = this.result(w, t[1], body as ResultBody, 'http');
      return r.status === 200 ? send(200, r.body) : fail(r.status, r.code!);
    }
    return fail(404, 'NOT_FOUND');
  }
}

function handles(w: FakeWorker, task: Task): boolean {
  return w.request.taskTypes.some((t) => t.name === task.taskType);
}
