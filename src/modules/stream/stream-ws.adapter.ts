import { WsAdapter } from '@nestjs/platform-ws';
import type { MessageMappingProperties } from '@nestjs/websockets';
import http, { type IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import type { Observable } from 'rxjs';
import type { WebSocket, WebSocketServer } from 'ws';
import { refuseUpgrade } from '../../core/http/upgrade-refusal';
import { rootLogger } from '../../core/logging/logger';
import { CLOSE } from './stream.dto';

/** The port of gateways that declare none: they share the API's HTTP server. */
const API_SERVER = 0;
/** How long shutdown waits for clients to answer the close frame before it cuts their sockets. */
const CLOSE_GRACE_MS = 1_000;

type PathServer = WebSocketServer & { path: string };

/**
 * Nest's `ws` adapter with the API's conventions for gateways on the API's HTTP server: an upgrade
 * to a path no gateway serves is refused with a 404 in the error envelope (unless another upgrade
 * handler is registered), client socket errors are logged at debug (they are the client's), a
 * gateway without `@SubscribeMessage` handlers reads its sockets itself (nothing is parsed for
 * it), and shutdown sends 1001 and waits briefly for the closing handshake before it terminates.
 */
/** A gateway path with `:name` segments (`/api/v1/workers/:workerId/channel`) as a pattern; null for a plain path. */
function pathPattern(path: string): RegExp | null {
  if (!path.includes('/:')) return null;
  const parts = path.split('/').map((p) => (p.startsWith(':') ? '[^/]+' : p.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')));
  return new RegExp(`^${parts.join('/')}$`);
}

export class StreamWsAdapter extends WsAdapter {
  private readonly log = rootLogger().child({ component: 'ws' });

  protected override ensureHttpServerExists(port: number, httpServer = http.createServer()): http.Server | undefined {
    if (port !== API_SERVER) return super.ensureHttpServerExists(port, httpServer);
    if (this.httpServersRegistry.has(port)) return undefined;
    this.httpServersRegistry.set(port, httpServer);
    httpServer.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) =>
      this.route(httpServer, req, socket, head),
    );
    return httpServer;
  }

  private route(httpServer: http.Server, req: IncomingMessage, socket: Duplex, head: Buffer): void {
    let pathname: string;
    try {
      pathname = new URL(req.url ?? '/', 'http://localhost').pathname;
    } catch {
      refuseUpgrade(socket, req, 400, 'MALFORMED_URL', 'the request target is not a URL');
      return;
    }
    const servers = (this.wsServersRegistry.get(API_SERVER) ?? []) as PathServer[];
    const target = servers.find((s) => s.path === pathname || pathPattern(s.path)?.test(pathname));
    if (target) {
      target.handleUpgrade(req, socket, head, (ws) => target.emit('connection', ws, req));
      return;
    }
    if (httpServer.listenerCount('upgrade') <= 1)
      refuseUpgrade(socket, req, 404, 'NOT_FOUND', 'no WebSocket endpoint here');
  }

  override bindMessageHandlers(
    client: WebSocket,
    handlers: MessageMappingProperties[],
    transform: (data: unknown) => Observable<unknown>,
  ): void {
    if (handlers.length > 0) super.bindMessageHandlers(client, handlers, transform);
  }

  override bindErrorHandler(server: WebSocketServer): WebSocketServer {
    // A handshake the protocol refuses (no Sec-WebSocket-Key, an unknown version, not a GET) is
    // answered in the error envelope too: `ws` hands it here instead of its plain-text answer.
    server.on('wsClientError', (err: Error, socket: Duplex, req: IncomingMessage) =>
      req.method === 'GET'
        ? refuseUpgrade(socket, req, 400, 'BAD_HANDSHAKE', err.message, {
            // (RFC 6455 4.4: a version refused is answered with the versions served.)
            ...(/Sec-WebSocket-Version/i.test(err.message) ? { 'Sec-WebSocket-Version': '13, 8' } : {}),
          })
        : refuseUpgrade(socket, req, 405, 'METHOD_NOT_ALLOWED', 'a WebSocket upgrade is a GET', { Allow: 'GET' }),
    );
    // `route` hands each upgrade to the one server that serves its path (compared once normalized,
    // a gateway path's `:name` segments matching any segment): the server takes what it is given
    // rather than comparing the raw request target again (ws answers a mismatch in plain text).
    (server as unknown as { shouldHandle(req: IncomingMessage): boolean }).shouldHandle = () => true;
    server.on('connection', (ws: WebSocket) =>
      ws.on('error', (err) => this.log.debug({ err }, 'WebSocket client error')),
    );
    server.on('error', (err) => this.log.error({ err }, 'WebSocket server error'));
    return server;
  }

  override async close(server: WebSocketServer): Promise<void> {
    const open = [...server.clients].filter((ws) => ws.readyState !== ws.CLOSED);
    const closed = Promise.all(open.map((ws) => new Promise((resolve) => ws.once('close', resolve))));
    for (const ws of open) if (ws.readyState === ws.OPEN) ws.close(CLOSE.GOING_AWAY, 'server shutting down');
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([closed, new Promise((resolve) => (timer = setTimeout(resolve, CLOSE_GRACE_MS)))]);
    clearTimeout(timer);
    await super.close(server);
  }
}
