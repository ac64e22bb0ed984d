import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import { checkDestination, EgressError, pinnedLookup, type EgressPolicy } from './egress';

export interface EgressProxyOptions {
  /** Unix socket path to listen on (bound into the sandbox). */
  socketPath: string;
  /** Owner of the socket: the sandbox's host uid/gid, which must be able to connect. */
  owner?: { uid: number; gid: number };
  /** The step's egress list and the operator's policy: what each request is checked against. */
  egress: readonly string[];
  policy: EgressPolicy;
  /** A line for the step's log (denials, upstream failures). */
  log(level: 'info' | 'warn', message: string): void;
  /** Connections open at once (further ones are refused). */
  maxConnections?: number;
}

export interface EgressProxy {
  close(): Promise<void>;
}

/** Headers of one hop only (RFC 9110 §7.6.1), never forwarded. */
const HOP_BY_HOP = new Set([
  'connection',
  'keep-alive',
  'proxy-authenticate',
  'proxy-authorization',
  'proxy-connection',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
]);

/**
 * The only way out of a `cli` step's network namespace: an HTTP proxy on a Unix socket bound into
 * the sandbox (a forwarder inside turns it into 127.0.0.1:3128 there, see egress-forwarder.js).
 * `CONNECT host:port` (HTTPS and any other TCP protocol) and absolute-form `GET http://…` requests
 * are each checked against the step's egress list and the operator's policy exactly as the `http`
 * plugin's requests are: the host resolved here, every answer checked, the connection made to the
 * checked address. A refused destination gets 403 with the reason, which also goes to the step's log.
 * Written here rather than taken from a proxy package because the check must run between the
 * request and the upstream connection, and pin the address it checked.
 */
export async function startEgressProxy(o: EgressProxyOptions): Promise<EgressProxy> {
  const sockets = new Set<net.Socket>();
  const denied = new Set<string>();
  const logDenied = (e: EgressError) => {
    if (denied.size < 100 && !denied.has(e.message)) {
      denied.add(e.message);
      o.log('warn', `egress denied: ${e.message}`);
    }
  };
  // An absolute-form request names its host in the URL; a Host header is not required of it.
  const server = http.createServer({ requestTimeout: 0, keepAliveTimeout: 5_000, requireHostHeader: false });
  server.maxConnections = o.maxConnections ?? 256;
  server.on('connection', (s: net.Socket) => {
    sockets.add(s);
    s.once('close', () => sockets.delete(s));
  });

  server.on('connect', (req: http.IncomingMessage, client: net.Socket, head: Buffer) => {
    client.on('error', () => client.destroy());
    const target = /^\[?([^\]]+?)\]?:(\d{1,5})$/.exec(req.url ?? '');
    if (!target) return refuseRaw(client, 400, `CONNECT needs host:port, got ${req.url ?? ''}`);
    checkDestination(target[1], Number(target[2]), o.egress, o.policy).then(
      (dest) => {
        const upstream = net.connect({ host: dest.address, port: dest.port, family: dest.family });
        sockets.add(upstream);
        upstream.once('close', () => sockets.delete(upstream));
        let connected = false;
        upstream.once('connect', () => {
          connected = true;
          client.write('HTTP/1.1 200 Connection Established\r\n\r\n');
          if (head.length > 0) upstream.write(head);
          upstream.pipe(client);
          client.pipe(upstream);
        });
        upstream.on('error', (e: NodeJS.ErrnoException) => {
          if (connected) client.destroy();
          else refuseRaw(client, 502, `${req.url ?? ''}: ${e.code ?? e.message}`);
        });
        client.once('close', () => upstream.destroy());
      },
      (e: unknown) => {
        if (!(e instanceof EgressError)) return refuseRaw(client, 502, (e as Error).message);
        logDenied(e);
        refuseRaw(client, 403, e.message);
      },
    );
  });

  server.on('request', (req: http.IncomingMessage, res: http.ServerResponse) => {
    let url: URL;
    try {
      url = new URL(req.url ?? '');
    } catch {
      return refuse(res, 400, 'a proxy request names an absolute http:// URL');
    }
    if (url.protocol !== 'http:') return refuse(res, 400, `use CONNECT for ${url.protocol} URLs`);
    const port = url.port ? Number(url.port) : 80;
    checkDestination(url.hostname, port, o.egress, o.policy).then(
      (dest) => {
        // No prototype: a header the command names `toString` or `__proto__` is a header like any other.
        const headers = Object.create(null) as http.OutgoingHttpHeaders;
        const connectionTokens = new Set(
          String(req.headers.connection ?? '')
            .toLowerCase()
            .split(',')
            .map((t) => t.trim()),
        );
        for (let i = 0; i < req.rawHeaders.length; i += 2) {
          const name = req.rawHeaders[i];
          const lower = name.toLowerCase();
          if (HOP_BY_HOP.has(lower) || connectionTokens.has(lower)) continue;
          const prev = headers[name];
          headers[name] =
            prev === undefined ? req.rawHeaders[i + 1] : [...[prev].flat().map(String), req.rawHeaders[i + 1]];
        }
        // HTTP/1.0 clients may send no Host; the upstream request is HTTP/1.1, which needs one.
        if (req.headers.host === undefined) headers.host = url.host;
        const upstream = http.request(
          {
            method: req.method,
            host: dest.hostname,
            port: dest.port,
            path: `${url.pathname}${url.search}`,
            headers,
            setHost: false,
            lookup: pinnedLookup(dest),
            agent: false,
          },
          (up) => {
            const out: Record<string, string | string[]> = {};
            for (const [k, v] of Object.entries(up.headers)) if (v !== undefined && !HOP_BY_HOP.has(k)) out[k] = v;
            res.writeHead(up.statusCode ?? 502, up.statusMessage, out);
            up.pipe(res);
            up.on('error', () => res.destroy());
          },
        );
        upstream.on('error', (e: NodeJS.ErrnoException) => {
          if (res.headersSent) return res.destroy();
          refuse(res, 502, `${url.host}: ${e.code ?? e.message}`);
        });
        req.pipe(upstream);
        res.once('close', () => upstream.destroy());
      },
      (e: unknown) => {
        if (!(e instanceof EgressError)) return refuse(res, 502, (e as Error).message);
        logDenied(e);
        refuse(res, 403, e.message);
      },
    );
  });
  // WebSocket and other upgrades go through CONNECT; an upgrade asked of the proxy itself is refused.
  server.on('upgrade', (_req: http.IncomingMessage, client: net.Socket) =>
    refuseRaw(client, 501, 'use CONNECT to tunnel upgraded connections'),
  );
  server.on('clientError', (_e, s: net.Socket) => s.destroy());

  await fs.promises.rm(o.socketPath, { force: true });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(o.socketPath, () => {
      server.off('error', reject);
      resolve();
    });
  });
  if (o.owner) await fs.promises.chown(o.socketPath, o.owner.uid, o.owner.gid);
  await fs.promises.chmod(o.socketPath, 0o600);

  return {
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}

function refuse(res: http.ServerResponse, status: number, message: string): void {
  if (res.headersSent) return void res.destroy();
  res.writeHead(status, { 'content-type': 'text/plain; charset=utf-8', connection: 'close' });
  res.end(`${message}\n`);
}

function refuseRaw(client: net.Socket, status: number, message: string): void {
  if (!client.writable) return void client.destroy();
  const body = `${message}\n`;
  client.end(
    `HTTP/1.1 ${status} ${http.STATUS_CODES[status] ?? 'Error'}\r\ncontent-type: text/plain; charset=utf-8\r\n` +
      `content-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`,
  );
}
