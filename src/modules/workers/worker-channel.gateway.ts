import type { OnModuleDestroy } from '@nestjs/common';
import { WebSocketGateway, type OnGatewayConnection, type OnGatewayInit } from '@nestjs/websockets';
import type { IncomingMessage } from 'node:http';
import type { Socket } from 'node:net';
import type { RawData, VerifyClientCallbackAsync, WebSocket, WebSocketServer } from 'ws';
import type { z } from 'zod';
import { DomainError } from '../../core/errors/domain-error';
import type { WorkerPrincipalT } from '../../core/http/request-context';
import { assertStorable, parseInput } from '../../core/http/validation.guard';
import { refuseVerification } from '../../core/http/upgrade-refusal';
import { rootLogger } from '../../core/logging/logger';
import { TokenService } from '../auth/token.service';
import { TokenStatusCache } from '../auth/token-status-cache';
import { TasksService } from './tasks.service';
import { WorkerDirectory, type KnownWorker } from './worker-directory';
import { WorkerLiveness } from './worker-liveness';
import { TaskInbox, workerKey } from './task-inbox';
import { heartbeatBody, progressBody, resultBody, syncBody, workerParams, type TaskDto } from './workers.dto';
import { WorkersService } from './workers.service';

/** The channel's path; `:workerId` is the worker's id (see StreamWsAdapter's path patterns). */
export const WORKER_CHANNEL_PATH = '/api/v1/workers/:workerId/channel';
/** The channel's path; the stream adapter routes only paths of this shape here. */
const CHANNEL = /^\/api\/v1\/workers\/([^/]+)\/channel$/;
const BEARER = /^Bearer +([A-Za-z0-9_-]+\.[A-Za-z0-9_-]*\.[A-Za-z0-9_-]*)$/i;
const MAX_PAYLOAD = 2 * 1024 * 1024;
/** Close codes: the token is no longer valid; the worker is offline; a newer channel of the worker replaced this one. */
const CLOSE_UNAUTHORIZED = 4401;
const CLOSE_OFFLINE = 4409;
const CLOSE_REPLACED = 4410;
/** The longest delay a timer takes (a token expiring later is caught by the pings' checks). */
const MAX_TIMER_MS = 2 ** 31 - 1;
/** Close code: the token's tenant is disabled. */
const CLOSE_TENANT_DISABLED = 4403;

interface Session {
  ws: WebSocket;
  /** The channel's connection, corked while the frames of one turn of the event loop are sent (see send). */
  socket: Socket;
  corked: boolean;
  w: KnownWorker;
  p: WorkerPrincipalT;
  /** Tasks the worker can still take (its `ready` credits less the tasks offered and reserved). */
  credit: number;
  /** Credits reserved by a dispatch under way here (see TaskInbox.dispatch). */
  reserved: number;
  /** Tasks offered on this channel and not yet answered, by task id: their run. */
  held: Map<string, string>;
  /** When the channel opened, by the database's clock (µs), once announced to the api processes. */
  stamp?: number;
  /** The newest stamp heard of another channel of the worker before this one's was known. */
  newer?: number;
  /** Closed because a newer channel of the worker opened (here or in another api process). */
  replaced: boolean;
  pulling: boolean;
  again: boolean;
  /** Messages handled one after another. */
  queue: Promise<void>;
}

/**
 * The worker channel (WebSocket, same worker token and tenant header as the REST routes): tasks
 * are offered as soon as they are assigned, up to the credits the worker gave (`ready`), cancels
 * are pushed at once (a cancelled run), and results, progress and heartbeats go the other way,
 * each answered on the channel. The worker is heard from by its messages and its answers to the
 * pings the server sends every third of its TTL.
 */
@WebSocketGateway({ path: WORKER_CHANNEL_PATH, maxPayload: MAX_PAYLOAD })
export class WorkerChannelGateway
  implements OnGatewayInit<WebSocketServer>, OnGatewayConnection<WebSocket>, OnModuleDestroy
{
  private server?: WebSocketServer;
  /** The open channel of each worker in this process (tenant and worker id). */
  private readonly channels = new Map<string, Session>();
  private readonly upgrades = new WeakMap<IncomingMessage, { p: WorkerPrincipalT; w: KnownWorker }>();
  private readonly log = rootLogger().child({ component: 'workers' });

  constructor(
    private readonly tokens: TokenService,
    private readonly statuses: TokenStatusCache,
    private readonly directory: WorkerDirectory,
    private readonly inbox: TaskInbox,
    private readonly liveness: WorkerLiveness,
    private readonly tasks: TasksService,
    private readonly workers: WorkersService,
  ) {
    inbox.onChannel((tenantId, workerId, stamp) => this.openedElsewhere(workerKey(tenantId, workerId), stamp));
    inbox.onListening(() => void this.recheck());
    // A revoked token's channels, and a disabled tenant's, close at once (not at their next message).
    statuses.onChange((tenantId, jti) => {
      for (const s of this.channels.values())
        if (s.p.tenantId === tenantId && (jti === undefined || s.p.jti === jti)) void this.admitted(s);
    });
  }

  afterInit(server: WebSocketServer): void {
    this.server = server;
    const verifyClient: VerifyClientCallbackAsync = ({ req }, done) => {
      this.authenticate(req).then(
        (who) => {
          this.upgrades.set(req, who);
          done(true);
        },
        (e: unknown) => {
          const err =
            e instanceof DomainError ? e : new DomainError('UNAUTHENTICATED', 'missing or invalid credentials', 401);
          refuseVerification(done, req, err);
        },
      );
    };
    server.options.verifyClient = verifyClient;
  }

  onModuleDestroy(): void {
    for (const ws of this.server?.clients ?? []) ws.close(1001, 'server shutting down');
  }

  private async authenticate(req: IncomingMessage): Promise<{ p: WorkerPrincipalT; w: KnownWorker }> {
    const m = BEARER.exec((req.headers.authorization ?? '').trim());
    if (!m) throw new DomainError('UNAUTHENTICATED', 'Authorization: Bearer <worker token> is required', 401);
    const t = await this.tokens.verify(m[1]);
    if (t.kind !== 'worker') throw new DomainError('INSUFFICIENT_SCOPE', 'the channel needs a worker token', 403);
    const status = await this.statuses.status(t.tid, t.jti);
    if (!status) throw new DomainError('INVALID_TOKEN', 'token unknown to this instance', 401);
    if (status.revoked) throw new DomainError('TOKEN_REVOKED', 'token revoked', 401);
    if (req.headers['x-tenant-id'] !== t.tid)
      throw new DomainError('TENANT_MISMATCH', 'X-Tenant-Id must name the token’s tenant', 403);
    if (!status.tenantActive) throw new DomainError('TENANT_DISABLED', 'tenant is disabled', 403);
    const p: WorkerPrincipalT = {
      kind: 'worker',
      tenantId: t.tid,
      subject: t.sub,
      pool: t.pool,
      jti: t.jti,
      exp: t.exp,
    };
    const { workerId } = parseInput(workerParams, { workerId: channelWorkerId(req) }, 'path');
    return { p, w: await this.directory.live(p, workerId) };
  }

  handleConnection(ws: WebSocket, req: IncomingMessage): void {
    const who = this.upgrades.get(req);
    this.upgrades.delete(req);
    if (!who) {
      ws.close(CLOSE_UNAUTHORIZED, 'the upgrade was not authenticated');
      return;
    }
    const s: Session = {
      ws,
      socket: req.socket,
      corked: false,
      w: who.w,
      p: who.p,
      credit: 0,
      reserved: 0,
      held: new Map(),
      replaced: false,
      pulling: false,
      again: false,
      queue: Promise.resolve(),
    };
    // A worker has one channel: a newer one replaces the older, here or in another api process,
    // which is closed at once (its socket may be dead without that process knowing yet), so
    // nothing is offered on it after the worker synced on the newer one.
    const k = workerKey(s.w.tenantId, s.w.workerId);
    const older = this.channels.get(k);
    this.channels.set(k, s);
    if (older) this.replace(older);
    this.tasks.channelOpened(s.w).then(
      (stamp) => {
        s.stamp = stamp;
        if (s.newer !== undefined && s.newer > stamp) this.replace(s);
      },
      (e: unknown) => this.log.warn({ err: e, workerId: s.w.workerId }, 'announcing the channel failed'),
    );
    // The worker is heard from when it sends a message or answers a ping: an open socket alone
    // proves nothing (a paused or hung worker keeps its connection open).
    const seen = () => this.liveness.seen(s.w.tenantId, s.w.workerId);
    seen();
    ws.on('pong', seen);
    const alive = setInterval(
      () => {
        if (ws.readyState === ws.OPEN) void this.admitted(s).then((ok) => ok && ws.ping());
      },
      Math.max(500, Math.floor(s.w.ttlMs / 3)),
    );
    const untilExpiry = s.p.exp * 1000 - Date.now();
    const expiry = untilExpiry < MAX_TIMER_MS ? setTimeout(() => void this.admitted(s), untilExpiry) : undefined;
    const unsubscribe = this.inbox.subscribe(s.w.tenantId, s.w.workerId, {
      task: () => this.offer(s),
      cancelled: (runId) => {
        for (const [taskId, run] of s.held)
          if (run === runId) {
            s.held.delete(taskId);
            this.send(s, { type: 'cancel', attemptId: taskId, reason: 'cancelled' });
          }
      },
      status: (status) => {
        if (status === 'offline') ws.close(CLOSE_OFFLINE, 'the worker is offline: register again');
      },
    });
    // A dispatch here delivers to the channel at once, up to its credits.
    const untake = this.inbox.addTaker({
      tenantId: s.w.tenantId,
      pool: s.w.pool,
      workerId: s.w.workerId,
      reserve: () => {
        if (s.pulling || s.reserved > 0 || s.credit <= 0 || s.w.status !== 'online' || ws.readyState !== ws.OPEN)
          return 0;
        s.reserved = s.credit;
        s.credit = 0;
        return s.reserved;
      },
      settle: (rows, reserved) => {
        s.reserved = 0;
        s.credit += reserved - rows.length;
        if (ws.readyState !== ws.OPEN) {
          s.credit += rows.length;
          return false;
        }
        if (rows.length > 0) this.sendTasks(s, this.tasks.handOver(s.w, rows), rows.length);
        else if (s.again) this.offer(s);
        return true;
      },
    });
    ws.on('close', () => {
      if (this.channels.get(k) === s) this.channels.delete(k);
      clearInterval(alive);
      clearTimeout(expiry);
      unsubscribe();
      untake();
    });
    ws.on('message', (data: RawData, isBinary: boolean) => {
      seen();
      s.queue = s.queue.then(() => this.handle(s, data, isBinary)).catch(() => undefined);
    });
  }

  /**
   * Closes the channel unless its token still holds: not revoked, not expired, its tenant active.
   * Checked before each message, on each ping, at the token's expiry and when a revocation or a
   * tenant's status change is heard: a channel outlives none of them.
   */
  private async admitted(s: Session): Promise<boolean> {
    const refusal = await this.statuses.refusal(s.p.tenantId, s.p.jti, s.p.exp);
    if (s.ws.readyState !== s.ws.OPEN) return false;
    if (!refusal) return true;
    if (refusal.code === 'TENANT_DISABLED') s.ws.close(CLOSE_TENANT_DISABLED, 'the tenant is disabled');
    else s.ws.close(CLOSE_UNAUTHORIZED, 'the token is no longer valid');
    // Its worker can no longer act: it is gone, and the tasks it held go elsewhere.
    await this.tasks
      .takeOffline(s.w)
      .catch((e: unknown) => this.log.warn({ err: e, workerId: s.w.workerId }, 'taking the worker offline failed'));
    return false;
  }

  private async handle(s: Session, data: RawData, isBinary: boolean): Promise<void> {
    if (!(await this.admitted(s))) return;
    let msg: { type?: unknown; attemptId?: unknown; credit?: unknown; [k: string]: unknown };
    try {
      msg = isBinary ? {} : (JSON.parse(rawText(data)) as typeof msg);
      if (msg === null || typeof msg !== 'object' || Array.isArray(msg)) throw new Error('not an object');
    } catch {
      this.send(s, { type: 'error', code: 'BAD_MESSAGE', message: 'messages are JSON objects with a type' });
      return;
    }
    try {
      switch (msg.type) {
        case 'ready': {
          const n = typeof msg.credit === 'number' && Number.isInteger(msg.credit) ? msg.credit : 0;
          if (n < 1 || n > 1_000)
            throw new DomainError('BAD_MESSAGE', 'ready: credit is an integer from 1 to 1000', 400);
          s.credit = Math.min(1_000, s.credit + n);
          this.offer(s);
          return;
        }
        case 'result': {
          const id = attemptId(msg.attemptId);
          const body = bodyOf(resultBody, msg, true);
          s.held.delete(id);
          // Results are applied together with others (group commit): the next message does not wait.
          this.tasks.result(s.p, s.w.workerId, id, body).then(
            (answer) => this.send(s, { type: 'ack', attemptId: id, ...answer }),
            (e: unknown) => this.fail(s, id, e),
          );
          return;
        }
        case 'progress': {
          const id = attemptId(msg.attemptId);
          await this.tasks.progress(s.p, s.w.workerId, id, bodyOf(progressBody, msg, true));
          return;
        }
        case 'sync': {
          const { holding } = bodyOf(syncBody, msg);
          // Handled before the messages after it (a `ready` among them): nothing is offered on this
          // channel before the tasks given back are assigned again.
          const answer = await this.tasks.sync(s.p, s.w.workerId, holding, 'channel');
          this.send(s, { type: 'sync', ...answer });
          return;
        }
        case 'heartbeat': {
          const beat = await this.workers.heartbeat(s.p, s.w.workerId, bodyOf(heartbeatBody, msg).loaded);
          this.send(s, { type: 'heartbeat', ...beat });
          if (beat.status === 'offline') s.ws.close(CLOSE_OFFLINE, 'the worker is offline: register again');
          return;
        }
        default:
          throw new DomainError('BAD_MESSAGE', 'type must be ready, result, progress, sync or heartbeat', 400);
      }
    } catch (e) {
      this.fail(s, typeof msg.attemptId === 'string' ? msg.attemptId : undefined, e);
    }
  }

  /** Another channel of the worker opened, in this api process or another, stamped `stamp`. */
  private openedElsewhere(k: string, stamp: number): void {
    const s = this.channels.get(k);
    if (!s) return;
    if (s.stamp === undefined) s.newer = Math.max(s.newer ?? 0, stamp);
    else if (stamp > s.stamp) this.replace(s);
  }

  /**
   * The stamps of the newest connections of the workers with a channel here, read again: an
   * announcement made while this process's listening connection was down never reached it.
   */
  private async recheck(): Promise<void> {
    const open = [...this.channels.values()];
    if (open.length === 0) return;
    try {
      const newest = await this.tasks.newestConnections(
        open.map((s) => ({ tenantId: s.w.tenantId, workerId: s.w.workerId })),
      );
      for (const n of newest) this.openedElsewhere(workerKey(n.tenantId, n.workerId), n.stamp);
    } catch (e) {
      this.log.warn({ err: e }, "reading the workers' newest connections failed");
    }
  }

  /**
   * Closes a channel a newer one of its worker replaced. The tasks offered on it and not answered
   * may have gone into a dead socket after the worker synced on the newer channel: they are given
   * back to the worker, offered again on its newer channel (the SDK runs an attempt it holds once).
   */
  private replace(s: Session): void {
    if (s.replaced) return;
    s.replaced = true;
    const k = workerKey(s.w.tenantId, s.w.workerId);
    if (this.channels.get(k) === s) this.channels.delete(k);
    s.ws.close(CLOSE_REPLACED, 'replaced by a newer channel of this worker');
    const held = [...s.held.keys()];
    s.held.clear();
    if (held.length > 0) this.giveBack(s, held);
  }

  /** Answers a message that failed with its error (an unexpected one is logged and answered INTERNAL). */
  private fail(s: Session, attemptId: string | undefined, e: unknown): void {
    const err = e instanceof DomainError ? e : null;
    if (!err) this.log.warn({ err: e }, 'worker channel message failed');
    this.send(s, {
      type: 'error',
      ...(attemptId !== undefined ? { attemptId } : {}),
      code: err?.code ?? 'INTERNAL',
      message: err?.message ?? 'internal error',
    });
  }

  /** Sends tasks delivered to the worker (`n` of them, fewer once those refused for their inputs are left out). */
  private sendTasks(s: Session, tasks: Promise<TaskDto[]>, n: number): void {
    s.pulling = true;
    void tasks
      .then(
        (ts) => {
          s.credit += n - ts.length;
          if (this.gone(s, ts)) return;
          for (const t of ts) {
            s.held.set(t.attemptId, t.runId);
            this.send(s, { type: 'task', task: t });
          }
        },
        (e: unknown) => {
          s.credit += n;
          this.log.warn({ err: e, workerId: s.w.workerId }, 'offering tasks failed');
        },
      )
      .finally(() => {
        s.pulling = false;
        if (s.again) this.offer(s);
      });
  }

  /** Offers the worker what is assigned to it, up to its credits (one pull at a time per channel). */
  private offer(s: Session): void {
    if (s.pulling || s.reserved > 0) {
      s.again = true;
      return;
    }
    if (s.credit <= 0 || s.w.status !== 'online' || s.ws.readyState !== s.ws.OPEN) return;
    if (!this.inbox.mayHaveWork(s.w.tenantId, s.w.workerId)) return;
    s.pulling = true;
    s.again = false;
    const mark = this.inbox.mark(s.w.tenantId, s.w.workerId);
    void this.tasks
      .take(s.w, s.credit)
      .then(
        (tasks) => {
          if (tasks.length === 0) this.inbox.foundNothing(s.w.tenantId, s.w.workerId, mark);
          if (this.gone(s, tasks)) return;
          for (const t of tasks) {
            s.credit -= 1;
            s.held.set(t.attemptId, t.runId);
            this.send(s, { type: 'task', task: t });
          }
        },
        (e: unknown) => this.log.warn({ err: e, workerId: s.w.workerId }, 'offering tasks failed'),
      )
      .finally(() => {
        s.pulling = false;
        if (s.again) this.offer(s);
      });
  }

  /**
   * Whether the channel closed (or is closing) while `tasks` were being delivered to it: they are
   * then given back to the worker, to be offered on its next channel or pull.
   */
  private gone(s: Session, tasks: TaskDto[]): boolean {
    if (s.ws.readyState === s.ws.OPEN) return false;
    const ids = tasks.map((t) => t.attemptId);
    if (ids.length > 0) this.giveBack(s, ids);
    return true;
  }

  private giveBack(s: Session, taskIds: string[]): void {
    this.tasks.giveBack(s.w, taskIds).catch((e: unknown) => {
      this.log.warn({ err: e, workerId: s.w.workerId }, 'giving tasks back failed');
    });
  }

  /**
   * Sends a message. The frames sent to a channel in one turn of the event loop (the acks of a
   * result batch, the tasks of a dispatch) leave in one write: each write to a socket is a system
   * call, which costs more than the frame.
   */
  private send(s: Session, msg: object): void {
    if (s.ws.readyState !== s.ws.OPEN) return;
    if (!s.corked) {
      s.corked = true;
      s.socket.cork();
      process.nextTick(uncork, s);
    }
    s.ws.send(JSON.stringify(msg));
  }
}

function uncork(s: Session): void {
  s.corked = false;
  s.socket.uncork();
}

/**
 * A message's body (all but its `type`, and its `attemptId` when it names a task) as `schema`
 * reads it; BAD_MESSAGE when it cannot.
 */
function bodyOf<T>(schema: z.ZodType<T>, msg: Record<string, unknown>, namesTask = false): T {
  const { type: _t, ...rest } = msg;
  if (namesTask) delete rest.attemptId;
  // What the routes' validation refuses before their schemas (text PostgreSQL cannot hold, numbers
  // with no JSON value, hostile depth), the channel refuses too.
  try {
    assertStorable(rest, msg.type as string);
  } catch (e) {
    throw e instanceof DomainError ? new DomainError('BAD_MESSAGE', e.message, 400) : e;
  }
  const body = schema.safeParse(rest);
  if (!body.success) throw new DomainError('BAD_MESSAGE', body.error.issues[0].message, 400);
  return body.data;
}

function attemptId(v: unknown): string {
  if (typeof v !== 'string' || !/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/.test(v))
    throw new DomainError('BAD_MESSAGE', 'attemptId must be a task id (uuid)', 400);
  return v;
}

function rawText(data: RawData): string {
  if (Buffer.isBuffer(data)) return data.toString('utf8');
  if (Array.isArray(data)) return Buffer.concat(data).toString('utf8');
  return Buffer.from(data).toString('utf8');
}

/** The worker id segment of a channel upgrade's path, decoded as a route's path parameter is. */
function channelWorkerId(req: IncomingMessage): string {
  const segment = CHANNEL.exec(new URL(req.url ?? '/', 'http://localhost').pathname)?.[1] ?? '';
  try {
    return decodeURIComponent(segment);
  } catch {
    return segment;
  }
}
