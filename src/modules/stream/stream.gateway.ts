import { Injectable, type OnApplicationBootstrap, type OnModuleDestroy } from '@nestjs/common';
import { HttpAdapterHost } from '@nestjs/core';
import type { IncomingMessage, Server } from 'node:http';
import type { Duplex } from 'node:stream';
import { WebSocketServer, type RawData, type WebSocket } from 'ws';
import { Database } from '../../core/database/database';
import { DomainError } from '../../core/errors/domain-error';
import { rootLogger } from '../../core/logging/logger';
import { AuthRepository } from '../auth/auth.repository';
import { grants } from '../auth/scopes';
import { TokenService } from '../auth/token.service';
import { START, formatCursor, parseCursor, type Cursor } from './stream-cursor';
import { CLOSE, clientMessage, type ClientMessage } from './stream.dto';
import { StreamHub, type StreamClient } from './stream-hub';
import { StreamRepository } from './stream.repository';

export const STREAM_PATH = '/api/v1/stream';
const AUTH_DEADLINE_MS = 5_000;
const MAX_SUBSCRIPTIONS = 32;
const TENANT = /^[a-z0-9][a-z0-9-]{0,62}$/;
const BEARER = /^Bearer ([A-Za-z0-9_-]+\.[A-Za-z0-9_-]*\.[A-Za-z0-9_-]*)$/;

interface Authenticated {
  tenantId: string;
  jti: string;
  exp: number;
}

class StreamAuthError extends Error {
  constructor(
    readonly status: 401 | 403 | 400,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

/**
 * `GET /api/v1/stream` (WebSocket upgrade) on the Fastify HTTP server. Authentication uses the
 * API's tokens, never the URL: `Authorization: Bearer` + `X-Tenant-Id` on the upgrade request, or
 * a first `{"type":"auth","token","tenantId"}` message within 5 s. `?since=<cursor>` (or `since`
 * in the auth message) resumes after the last event a client saw.
 */
@Injectable()
export class StreamGateway implements OnApplicationBootstrap, OnModuleDestroy {
  private wss?: WebSocketServer;
  private server?: Server;
  private readonly log = rootLogger().child({ component: 'stream' });
  private readonly onUpgrade = (req: IncomingMessage, socket: Duplex, head: Buffer) => this.upgrade(req, socket, head);

  constructor(
    private readonly adapterHost: HttpAdapterHost,
    private readonly tokens: TokenService,
    private readonly auth: AuthRepository,
    private readonly db: Database,
    private readonly repo: StreamRepository,
    private readonly hub: StreamHub,
  ) {}

  onApplicationBootstrap(): void {
    this.server = this.adapterHost.httpAdapter.getHttpServer() as Server;
    this.wss = new WebSocketServer({ noServer: true, maxPayload: 64 * 1024 });
    this.server.on('upgrade', this.onUpgrade);
  }

  onModuleDestroy(): void {
    this.server?.off('upgrade', this.onUpgrade);
    for (const ws of this.wss?.clients ?? []) ws.close(CLOSE.GOING_AWAY, 'server shutting down');
    this.wss?.close();
  }

  private upgrade(req: IncomingMessage, socket: Duplex, head: Buffer): void {
    const url = new URL(req.url ?? '/', 'http://localhost');
    if (url.pathname !== STREAM_PATH) {
      // Another path: left to its own handler, or refused when there is none.
      if (this.server && this.server.listeners('upgrade').length <= 1)
        refuse(socket, 404, 'NOT_FOUND', 'no WebSocket endpoint here');
      return;
    }
    if (url.searchParams.has('token') || url.searchParams.has('access_token')) {
      refuse(
        socket,
        400,
        'TOKEN_IN_URL',
        'tokens are not accepted in the URL; use the Authorization header or an auth message',
      );
      return;
    }
    const sinceParam = url.searchParams.get('since');
    const since = sinceParam === null ? undefined : parseCursor(sinceParam);
    if (sinceParam !== null && !since) {
      refuse(socket, 400, 'INVALID_CURSOR', 'since is not a stream cursor');
      return;
    }
    const header = req.headers.authorization;
    if (header === undefined) {
      this.wss!.handleUpgrade(req, socket, head, (ws) => this.awaitAuth(ws, since));
      return;
    }
    const tenantHeader = req.headers['x-tenant-id'];
    this.authenticate(header, typeof tenantHeader === 'string' ? tenantHeader : undefined).then(
      (who) => {
        if (socket.destroyed) return;
        this.wss!.handleUpgrade(req, socket, head, (ws) => void this.open(ws, who, since));
      },
      (e: unknown) => {
        const err = toAuthError(e);
        refuse(socket, err.status, err.code, err.message);
      },
    );
  }

  /** Verifies a token as the REST guard does (signature, expiry, revocation, tenant, scope read). */
  private async authenticate(authorization: string, tenantId: string | undefined): Promise<Authenticated> {
    const m = BEARER.exec(authorization.trim());
    if (!m) throw new StreamAuthError(401, 'INVALID_TOKEN', 'Authorization header is not a bearer JWT');
    return this.verify(m[1], tenantId);
  }

  private async verify(token: string, tenantId: string | undefined): Promise<Authenticated> {
    const v = await this.tokens.verify(token);
    if (v.kind !== 'tenant') throw new StreamAuthError(403, 'INSUFFICIENT_SCOPE', 'the stream needs a tenant token');
    const status = await this.auth.tenantTokenStatus(this.db.system, v.tid, v.jti);
    if (!status) throw new StreamAuthError(401, 'INVALID_TOKEN', 'token unknown to this instance');
    if (status.revoked) throw new StreamAuthError(401, 'TOKEN_REVOKED', 'token revoked');
    if (!tenantId) throw new StreamAuthError(400, 'MISSING_TENANT', 'X-Tenant-Id header is required');
    if (!TENANT.test(tenantId)) throw new StreamAuthError(400, 'INVALID_TENANT', 'X-Tenant-Id is not a tenant id');
    if (tenantId !== v.tid) throw new StreamAuthError(403, 'TENANT_MISMATCH', 'token does not belong to this tenant');
    if (!status.tenantActive) throw new StreamAuthError(403, 'TENANT_DISABLED', 'tenant is disabled');
    if (!grants(v.scopes, 'orchestrator:read'))
      throw new StreamAuthError(403, 'INSUFFICIENT_SCOPE', 'the stream needs scope orchestrator:read');
    return { tenantId: v.tid, jti: v.jti, exp: v.exp };
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
      this.verify(msg.token, msg.tenantId).then(
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
    who: Authenticated,
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
    this.hub.add(client);
    ws.on('close', () => this.hub.remove(client));
    ws.on('error', () => this.hub.remove(client));
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
        if (runId && !(await this.db.withTenant(c.tenantId, (tx) => this.repo.runExists(tx, runId)))) {
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

function toAuthError(e: unknown): StreamAuthError {
  if (e instanceof StreamAuthError) return e;
  if (e instanceof DomainError && (e.status === 401 || e.status === 403))
    return new StreamAuthError(e.status, e.code, e.message);
  rootLogger().warn({ err: e }, 'stream authentication failed unexpectedly');
  return new StreamAuthError(401, 'UNAUTHENTICATED', 'authentication failed');
}

const REASONS: Record<number, string> = { 400: 'Bad Request', 401: 'Unauthorized', 403: 'Forbidden', 404: 'Not Found' };

/** Answers an upgrade request with an HTTP error in the API's error envelope and closes the socket. */
function refuse(socket: Duplex, status: number, code: string, message: string): void {
  if (socket.destroyed) return;
  const body = JSON.stringify({ error: { code, message } });
  socket.end(
    `HTTP/1.1 ${status} ${REASONS[status] ?? 'Error'}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
  );
}
