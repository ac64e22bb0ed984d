import { connect } from 'node:net';
import WebSocket from 'ws';
import { errorEnvelopeSchema } from '../../src/core/errors/error-envelope';
import { startTestApp, type TestApp } from '../support/test-app';
import { refusal } from '../support/ws-refusal';

interface Msg {
  type: string;
  [k: string]: unknown;
}

const wsUrl = (app: TestApp, pathAndQuery = '/api/v1/stream') => `${app.url.replace('http', 'ws')}${pathAndQuery}`;

/** Opens a socket, recording its messages from the first one and its close code. */
async function open(url: string, headers: Record<string, string> = {}, onOpen?: (ws: WebSocket) => void) {
  const ws = new WebSocket(url, { headers });
  const messages: Msg[] = [];
  let closed: number | undefined;
  ws.on('message', (d: Buffer) => messages.push(JSON.parse(d.toString('utf8')) as Msg));
  ws.on('close', (code) => (closed = code));
  await new Promise<void>((resolve, reject) => {
    ws.once('open', () => {
      onOpen?.(ws);
      resolve();
    });
    ws.once('error', reject);
  });
  const until = async (pred: () => boolean, what: string) => {
    const deadline = Date.now() + 10_000;
    while (!pred()) {
      if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}: ${JSON.stringify(messages)}`);
      await new Promise((r) => setTimeout(r, 20));
    }
  };
  return {
    ws,
    messages,
    until,
    closedWith: async () => {
      await until(() => closed !== undefined, 'close');
      return closed;
    },
  };
}

describe('WebSocket stream gateway', () => {
  let app: TestApp;
  let headers: Record<string, string>;

  beforeAll(async () => {
    app = await startTestApp();
    headers = { authorization: `Bearer ${app.adminToken}`, 'x-tenant-id': app.tenantId };
  });

  afterAll(async () => {
    await app.close();
  });

  it('refuses an upgrade before accepting it, with the status and error envelope of the REST API', async () => {
    const other = await app.tenant('gateway-other', ['orchestrator:read']);
    const cases: [string, Record<string, string>, number, string][] = [
      [wsUrl(app), { authorization: 'Bearer not-a-jwt', 'x-tenant-id': app.tenantId }, 401, 'INVALID_TOKEN'],
      [wsUrl(app), { ...headers, 'x-tenant-id': other.tenantId }, 403, 'TENANT_MISMATCH'],
      [wsUrl(app), { authorization: headers.authorization }, 400, 'MISSING_TENANT'],
      [wsUrl(app, `/api/v1/stream?token=${app.adminToken}`), {}, 400, 'TOKEN_IN_URL'],
      [wsUrl(app, '/api/v1/stream?since=abc'), headers, 400, 'INVALID_CURSOR'],
    ];
    for (const [url, h, status, code] of cases) {
      const r = await refusal(url, h);
      expect([r.status, r.contentType]).toEqual([status, 'application/json']);
      expect(errorEnvelopeSchema.parse(r.body).error.code).toBe(code);
    }
    // The refusal carries the trace id of the request's traceparent, as a REST answer does.
    const trace = '4bf92f3577b34da6a3ce929d0e0e4736';
    const traced = await refusal(wsUrl(app), {
      authorization: 'Bearer x',
      traceparent: `00-${trace}-00f067aa0ba902b7-01`,
    });
    expect(errorEnvelopeSchema.parse(traced.body).error.traceId).toBe(trace);
  });

  it('refuses an upgrade to a path no gateway serves with 404 in the error envelope', async () => {
    const r = await refusal(wsUrl(app, '/api/v1/streams'), headers);
    expect(r.status).toBe(404);
    expect(errorEnvelopeSchema.parse(r.body).error).toMatchObject({
      code: 'NOT_FOUND',
      traceId: expect.stringMatching(/^[0-9a-f]{32}$/),
    });
  });

  it('answers a handshake the WebSocket protocol refuses in the error envelope, with the headers it calls for', async () => {
    // Sent by hand: a client library does not send such handshakes.
    const raw = (request: string) =>
      new Promise<{ head: string; body: string }>((resolve, reject) => {
        const socket = connect(Number(new URL(app.url).port), '127.0.0.1', () => socket.write(request));
        let text = '';
        socket.on('data', (d) => (text += d.toString('utf8')));
        socket.on('close', () => {
          const [head, body] = text.split('\r\n\r\n');
          resolve({ head, body });
        });
        socket.on('error', reject);
      });
    const upgrade = (method: string, target: string, extra: string) =>
      `${method} ${target} HTTP/1.1\r\nHost: localhost\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n${extra}\r\n`;
    const key = 'Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n';
    const cases: [string, number, string, RegExp | null][] = [
      [upgrade('GET', '/api/v1/stream', 'Sec-WebSocket-Version: 13\r\n'), 400, 'BAD_HANDSHAKE', null],
      [
        upgrade('GET', '/api/v1/stream', `${key}Sec-WebSocket-Version: 99\r\n`),
        400,
        'BAD_HANDSHAKE',
        /^sec-websocket-version: 13, 8$/im,
      ],
      [
        upgrade('POST', '/api/v1/stream', `${key}Sec-WebSocket-Version: 13\r\n`),
        405,
        'METHOD_NOT_ALLOWED',
        /^allow: GET$/im,
      ],
      // A target that names the stream once normalized reaches it (and its credentials are asked for).
      [
        upgrade('GET', '/api/v1/./stream', `${key}Sec-WebSocket-Version: 13\r\nAuthorization: Bearer not-a-jwt\r\n`),
        401,
        'INVALID_TOKEN',
        null,
      ],
    ];
    for (const [request, status, code, header] of cases) {
      const { head, body } = await raw(request);
      expect(head).toMatch(new RegExp(`^HTTP/1\\.1 ${status} `));
      expect(head).toMatch(/content-type: application\/json/i);
      if (header) expect(head).toMatch(header);
      expect(errorEnvelopeSchema.parse(JSON.parse(body)).error.code).toBe(code);
    }
  });

  it('handles a subscribe sent before ready after the ready message, in order', async () => {
    const c = await open(wsUrl(app), headers, (ws) => ws.send(JSON.stringify({ type: 'subscribe', id: 'early' })));
    try {
      await c.until(() => c.messages.length >= 2, 'ready and subscribed');
      expect(c.messages.map((m) => m.type)).toEqual(['ready', 'subscribed']);
      expect(c.messages[1].id).toBe('early');
    } finally {
      c.ws.terminate();
    }
  });

  it('closes a socket that sends a frame over 64 KiB with 1009, before and after authentication', async () => {
    const big = JSON.stringify({ type: 'ping', pad: 'x'.repeat(70 * 1024) });
    const unauthenticated = await open(wsUrl(app));
    unauthenticated.ws.send(big);
    expect(await unauthenticated.closedWith()).toBe(1009);
    const authenticated = await open(wsUrl(app), headers);
    await authenticated.until(() => authenticated.messages.some((m) => m.type === 'ready'), 'ready');
    authenticated.ws.send(big);
    expect(await authenticated.closedWith()).toBe(1009);
    // The server goes on serving.
    const next = await open(wsUrl(app), headers);
    await next.until(() => next.messages.some((m) => m.type === 'ready'), 'ready');
    next.ws.terminate();
  });
});

describe('WebSocket stream gateway shutdown', () => {
  it('closes every socket with 1001 when the server shuts down, authenticated or not', async () => {
    const app = await startTestApp();
    try {
      const authenticated = await open(wsUrl(app), {
        authorization: `Bearer ${app.adminToken}`,
        'x-tenant-id': app.tenantId,
      });
      await authenticated.until(() => authenticated.messages.some((m) => m.type === 'ready'), 'ready');
      const waiting = await open(wsUrl(app));
      const t0 = Date.now();
      await app.ordo.close();
      expect(Date.now() - t0).toBeLessThan(5_000);
      expect([await authenticated.closedWith(), await waiting.closedWith()]).toEqual([1001, 1001]);
    } finally {
      await app.close();
    }
  });
});
