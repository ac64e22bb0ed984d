import type { IncomingMessage } from 'node:http';
import WebSocket from 'ws';
import { startTestApp, type TestApp } from '../support/test-app';

interface Msg {
  type: string;
  [k: string]: unknown;
}

interface Refusal {
  status: number;
  contentType: string | undefined;
  body: { error?: { code?: string; message?: string } };
}

const wsUrl = (app: TestApp, pathAndQuery = '/api/v1/stream') => `${app.url.replace('http', 'ws')}${pathAndQuery}`;

/** Attempts an upgrade that must be refused; resolves with the HTTP answer. */
function refusal(url: string, headers: Record<string, string> = {}): Promise<Refusal> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, { headers });
    ws.once('open', () => {
      ws.terminate();
      reject(new Error('the upgrade was accepted'));
    });
    ws.once('unexpected-response', (_req, res: IncomingMessage) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () =>
        resolve({
          status: res.statusCode ?? 0,
          contentType: res.headers['content-type'],
          body: JSON.parse(Buffer.concat(chunks).toString('utf8')) as Refusal['body'],
        }),
      );
    });
    ws.once('error', (e) => reject(e));
  });
}

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
      expect([r.status, r.contentType, r.body.error?.code]).toEqual([status, 'application/json', code]);
    }
  });

  it('refuses an upgrade to a path no gateway serves with 404 in the error envelope', async () => {
    const r = await refusal(wsUrl(app, '/api/v1/streams'), headers);
    expect([r.status, r.body.error?.code]).toEqual([404, 'NOT_FOUND']);
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
