import type { OnModuleDestroy } from '@nestjs/common';
import {
  WebSocketGateway,
  type OnGatewayConnection,
  type OnGatewayDisconnect,
  type OnGatewayInit,
} from '@nestjs/websockets';
import type { IncomingMessage } from 'node:http';
import type { RawData, VerifyClientCallbackAsync, WebSocket, WebSocketServer } from 'ws';
import { Database } from '../../core/database/database';
import { refuseVerification } from '../../core/http/upgrade-refusal';
import { rootLogger } from '../../core/logging/logger';
import { StreamAuthenticator, toAuthError, type StreamIdentity, type StreamUpgrade } from './stream-auth';
import { START, formatCursor, parseCursor, type Cursor } from './stream-cursor';
import { CLOSE, clientMessage, type ClientMessage } from './stream.dto';
import { StreamHub, type StreamClient } from './stream-hub';
import { RunsRepository } from '../runs/runs.repository';
import { StreamRepository } from './stream.repository';

export const STREAM_PATH = '/api/v1/stream';
const AUTH_DEADLINE_MS = 5_000;
const MAX_SUBSCRIPTIONS = 32;
const MAX_PAYLOAD = 64 * 1024;

/**
 * `GET /api/v1/stream` (WebSocket upgrade), a gateway on the API's HTTP server. Authentication uses
 * the API's tokens, never the URL: `Authorization: Bearer` + `X-Tenant-Id` on the upgrade request
 * (checked before the upgrade is accepted; a refusal is an HTTP error in the error envelope), or a
 * first `{"type":"auth","token","tenantId"}` message within 5 s. `?since=<cursor>` (or `since` in
 * the auth message) resumes after the last event a client saw.
 *
 * The protocol is the gateway's own (`{"type": ...}` messages, handled one after another per
 * socket, none before the connection is ready), so it reads its sockets itself rather than through
 * `@SubscribeMessage` handlers.
 */
@WebSocketGateway({ path: STREAM_PATH, maxPayload: MAX_PAYLOAD })
export class StreamGateway
  implements
    OnGatewayInit<WebSocketServer>,
    OnGatewayConnection<WebSocket>,
    OnGatewayDisconnect<WebSocket>,
    OnModuleDestroy
{
  private server?: WebSocketServer;
  /** Upgrade requests accepted by `verifyClient`, until their connection is handled. */
  private readonly upgrades = new WeakMap<IncomingMessage, StreamUpgrade>();
  private readonly clients = new WeakMap<WebSocket, StreamClient>();
  private readonly log = rootLogger().child({ component: 'stream' });

  constructor(
    private readonly auth: StreamAuthenticator,
    private readonly db: Database,
    private readonly repo: StreamRepository,
    private readonly runs: RunsRepository,
    private readonly hub: StreamHub,
  ) {}

  afterInit(server: WebSocketServer): void {
    this.server = server;
    // The check needs this gateway's services, which the decorator's static options cannot reach;
    // `ws` reads `verifyClient` from its options at every upgrade.
    const verifyClient: VerifyClientCallbackAsync = ({ req }, done) => {
      this.auth.checkUpgrade(req).then(
        (upgrade) => {
          this.upgrades.set(req, upgrade);
          done(true);
        },
        (e: unknown) => {
          refuseVerification(done, req, toAuthError(e));
        },
      );
    };
    server.options.verifyClient = verifyClient;
  }

  handleConnection(ws: WebSocket, req: IncomingMessage): void {
    const upgrade = this.upgrades.get(req);
    this.upgrades.delete(req);
    if (!upgrade) ws.close(CLOSE.UNAUTHORIZED, 'the upgrade was not authenticated');
    else if (upgrade.who) void this.open(ws, upgrade.who, upgrade.since);
    else this.awaitAuth(ws, upgrade.since);
  }

  handleDisconnect(ws: WebSocket): void {
    const client = this.clients.get(ws);
    if (client) this.hub.remove(client);
  }

  onModuleDestroy(): void {
    for (const ws of this.server?.clients ?? []) ws.close(CLOSE.GOING_AWAY, 'server shutting down');
  }

  /** A socket without an Authorization header: the first message must be `auth`, within the deadline. */
  private awaitAuth(ws: WebSocket, since: Cursor | undefined): void {
    const timer = setTimeout(() => ws.close(CLOSE.AUTH_TIMEOUT, 'no auth message within 5 s'), AUTH_DEADLINE_MS);
    ws.once('message', (data: RawData, isBinary: boolean) => {
      clearTimeout(timer);
      const msg = isBinary ? undefined : parse(data);
      if (!msg || msg.type !== 'auth') {
        ws.close(CLOSE.BAD_MESSAGE, 'the first message must be {"type":"auth","token","tenantId"}');
        return;
      }
      const early = bufferMessages(ws);
      this.auth.verify(msg.token, msg.tenantId).then(
        (who) => this.open(ws, who, msg.since !== undefined ? parseCursor(msg.since) : since, early),
        (e: unknown) => {
          early.stop();
          const err = toAuthError(e);
          ws.close(
            err.status === 403 ? CLOSE.FORBIDDEN : err.status === 400 ? CLOSE.BAD_MESSAGE : CLOSE.UNAUTHORIZED,
            err.code,
          );
        },
      );
    });
    ws.on('close', () => clearTimeout(timer));
  }

  /**
   * Registers an authenticated socket. Messages that arrive while its start position is read are
   * kept and handled afterwards, and every message is handled after the previous one finished,
   * so a subscribe sent right after the upgrade (or the auth message) is never lost or reordered.
   */
  private async open(
    ws: WebSocket,
    who: StreamIdentity,
    since: Cursor | undefined,
    early = bufferMessages(ws),
  ): Promise<void> {
    let cursor: Cursor;
    try {
      cursor = since ?? (await this.headCursor(who.tenantId));
    } catch (e) {
      early.stop();
      this.log.warn({ err: e, tenant: who.tenantId }, 'stream cannot read its start position');
      ws.close(1011, 'internal error');
      return;
    }
    early.stop();
    if (ws.readyState !== ws.OPEN) return;
    const client: StreamClient = {
      ws,
      tenantId: who.tenantId,
      jti: who.jti,
      exp: who.exp,
      cursor,
      subscriptions: new Map(),
      closing: false,
    };
    this.clients.set(ws, client);
    this.hub.add(client);
    let queue = Promise.resolve();
    const handle = (data: RawData, isBinary: boolean) => {
      queue = queue
        .then(() => this.onMessage(client, data, isBinary))
        .catch((e: unknown) => {
          this.log.warn({ err: e, tenant: client.tenantId }, 'stream message failed');
          this.hub.send(client, { type: 'error', code: 'INTERNAL', message: 'the message could not be handled' });
        });
    };
    ws.on('message', handle);
    this.hub.send(client, { type: 'ready', tenant: who.tenantId, cursor: formatCursor(cursor) });
    for (const [data, isBinary] of early.messages) handle(data, isBinary);
  }

  private async headCursor(tenantId: string): Promise<Cursor> {
    const head = await this.db.withTenant(tenantId, (tx) => this.repo.head(tx));
    return head ? { xid: BigInt(head.stream_xid), id: BigInt(head.stream_id) } : START;
  }
  private async onMessage(c: StreamClient, data: RawData, isBinary: boolean): Promise<void> {
    const msg = isBinary ? undefined : parse(data);
    if (!msg) {
      this.hub.send(c, {
        type: 'error',
        code: 'INVALID_MESSAGE',
        message: 'expected a JSON subscribe, unsubscribe or ping message',
      });
      return;
    }
    switch (msg.type) {
      case 'ping':
        this.hub.send(c, { type: 'pong' });
        return;
      case 'auth':
        this.hub.send(c, { type: 'error', code: 'ALREADY_AUTHENTICATED', message: 'this connection is authenticated' });
        return;
      case 'unsubscribe':
        if (!c.subscriptions.delete(msg.id)) {
          this.hub.send(c, {
            type: 'error',
            id: msg.id,
            code: 'UNKNOWN_SUBSCRIPTION',
            message: `no subscription ${msg.id}`,
          });
          return;
        }
        this.hub.send(c, { type: 'unsubscribed', id: msg.id });
        return;
      case 'subscribe': {
        if (c.subscriptions.has(msg.id)) {
          this.hub.send(c, {
            type: 'error',
            id: msg.id,
            code: 'DUPLICATE_SUBSCRIPTION',
            message: `subscription ${msg.id} exists`,
          });
          return;
        }
        if (c.subscriptions.size >= MAX_SUBSCRIPTIONS) {
          this.hub.send(c, {
            type: 'error',
            id: msg.id,
            code: 'TOO_MANY_SUBSCRIPTIONS',
            message: `at most ${MAX_SUBSCRIPTIONS} subscriptions`,
          });
          return;
        }
        const runId = msg.filter.runId;
        // Another tenant's run is indistinguishable from a missing one.
        if (runId && !(await this.db.withTenant(c.tenantId, (tx) => this.runs.runExists(tx, runId)))) {
          this.hub.send(c, { type: 'error', id: msg.id, code: 'RUN_NOT_FOUND', message: 'run not found' });
          return;
        }
        c.subscriptions.set(msg.id, msg.filter);
        this.hub.send(c, { type: 'subscribed', id: msg.id, cursor: formatCursor(c.cursor) });
        this.hub.wake(c.tenantId);
        return;
      }
    }
  }
}

/** Keeps a socket's messages until `stop` (while the connection is being set up). */
function bufferMessages(ws: WebSocket): { messages: [RawData, boolean][]; stop(): void } {
  const messages: [RawData, boolean][] = [];
  const listener = (data: RawData, isBinary: boolean) => {
    if (messages.length < 100) messages.push([data, isBinary]);
  };
  ws.on('message', listener);
  return { messages, stop: () => ws.off('message', listener) };
}

function parse(data: RawData): ClientMessage | undefined {
  let json: unknown;
  try {
    json = JSON.parse(Buffer.isBuffer(data) ? data.toString('utf8') : Buffer.concat(data as Buffer[]).toString('utf8'));
  } catch {
    return undefined;
  }
  const r = clientMessage.safeParse(json);
  return r.success ? r.data : undefined;
}
