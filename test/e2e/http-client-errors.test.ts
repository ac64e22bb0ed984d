import net from 'node:net';
import { errorEnvelopeSchema } from '../../src/core/errors/error-envelope';
import { startTestApp, type TestApp } from '../support/test-app';

const LIMIT = 4096;

interface RawAnswer {
  status: number;
  headers: Record<string, string>;
  body: unknown;
  /** The client saw ECONNRESET or EPIPE: the server closed with input unread. */
  reset: string | undefined;
}

/**
 * Sends `parts` over one TCP connection, one write after another (each waits for the previous to
 * be handed to the kernel), then reads until the server closes. Like an uploading client, it goes
 * on writing after the server has answered and ended its side (half-open), and ends its own once
 * everything is written. Writes that fail are recorded, not thrown: the question is whether the
 * answer arrives and the close is clean.
 */
function exchange(url: string, parts: (string | Buffer)[], opts: { pauseMs?: number } = {}): Promise<RawAnswer> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const socket = net.connect({ port: Number(port), host: hostname, allowHalfOpen: true });
    const chunks: Buffer[] = [];
    let reset: string | undefined;
    let written = false;
    let ended = false;
    socket.on('end', () => {
      ended = true;
      if (written) socket.end();
    });
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error('no close within 20 s'));
    }, 20_000);
    socket.on('data', (c: Buffer) => chunks.push(c));
    socket.on('error', (e: NodeJS.ErrnoException) => {
      reset ??= e.code ?? e.message;
    });
    socket.on('close', () => {
      clearTimeout(timer);
      const text = Buffer.concat(chunks).toString('utf8');
      const split = text.indexOf('\r\n\r\n');
      const head = split === -1 ? text : text.slice(0, split);
      const [statusLine, ...lines] = head.split('\r\n');
      const headers: Record<string, string> = {};
      for (const l of lines) {
        const colon = l.indexOf(':');
        if (colon > 0) headers[l.slice(0, colon).trim().toLowerCase()] = l.slice(colon + 1).trim();
      }
      let body: unknown;
      try {
        body = JSON.parse(text.slice(split + 4));
      } catch {
        body = undefined;
      }
      resolve({ status: Number(/^HTTP\/1\.1 (\d{3})/.exec(statusLine)?.[1] ?? 0), headers, body, reset });
    });
    socket.once('connect', () => {
      void (async () => {
        for (const p of parts) {
          if (socket.destroyed || reset) return;
          await new Promise<void>((done) => socket.write(p, () => done()));
          if (opts.pauseMs) await new Promise((r) => setTimeout(r, opts.pauseMs));
        }
        written = true;
        if (ended) socket.end();
      })();
    });
  });
}

describe('answers to requests refused before any route', () => {
  let app: TestApp;
  let as: { token: string; tenantId: string };
  const expectEnvelope = (body: unknown, code: string) => {
    expect(errorEnvelopeSchema.safeParse(body).success).toBe(true);
    const e = (body as { error: { code: string; traceId: string } }).error;
    expect(e.code).toBe(code);
    expect(e.traceId).toMatch(/^[0-9a-f]{32}$/);
  };

  beforeAll(async () => {
    app = await startTestApp({ ORDO_BODY_LIMIT_BYTES: String(LIMIT) });
    as = { token: app.adminToken, tenantId: app.tenantId };
  });
  afterAll(async () => app?.close());

  it('answers a 200 KB request header with 431 HEADERS_TOO_LARGE in the envelope, and closes without a reset', async () => {
    for (let i = 0; i < 10; i++) {
      const r = await exchange(app.url, [`GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(200_000)}\r\n\r\n`]);
      expect({ try: i, status: r.status, reset: r.reset }).toEqual({ try: i, status: 431, reset: undefined });
      expect(r.headers.connection).toBe('close');
      expect(r.headers['content-type']).toMatch(/^application\/json/);
      expectEnvelope(r.body, 'HEADERS_TOO_LARGE');
      expect((r.body as { error: { message: string } }).error.message).toMatch(/exceed \d+ bytes/);
    }
  });

  it('answers a header sent slowly past the limit with 431, reading the rest before it closes', async () => {
    const line = `X-Filler: ${'b'.repeat(4000)}\r\n`;
    const r = await exchange(
      app.url,
      ['POST /api/v1/tokens HTTP/1.1\r\nHost: x\r\n', ...Array<string>(12).fill(line), '\r\n'],
      {
        pauseMs: 5,
      },
    );
    expect({ status: r.status, reset: r.reset }).toEqual({ status: 431, reset: undefined });
    expectEnvelope(r.body, 'HEADERS_TOO_LARGE');
  });

  it.each([
    ['a malformed request line', 'GARBAGE\r\n\r\n'],
    ['an unknown HTTP version', 'GET /healthz HTTP/7.3\r\nHost: x\r\n\r\n'],
    ['a header name with a space', 'GET /healthz HTTP/1.1\r\nHost: x\r\nBad Header: 1\r\n\r\n'],
    [
      'a bad chunk size',
      'POST /api/v1/tokens HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n',
    ],
    [
      'both Content-Length and chunked',
      'POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n',
    ],
  ])('answers %s with 400 MALFORMED_REQUEST in the envelope', async (_name, request) => {
    const r = await exchange(app.url, [request]);
    expect({ status: r.status, reset: r.reset }).toEqual({ status: 400, reset: undefined });
    expect(r.headers.connection).toBe('close');
    expectEnvelope(r.body, 'MALFORMED_REQUEST');
  });

  it('answers 30 uploads of ORDO_BODY_LIMIT_BYTES + 1 bytes with a readable 413, naming the limit', async () => {
    const body = JSON.stringify({ scopes: ['orchestrator:read'], description: 'x'.repeat(LIMIT) }).slice(0, LIMIT + 1);
    expect(Buffer.byteLength(body)).toBe(LIMIT + 1);
    for (let i = 0; i < 30; i++) {
      const r = await app.request('POST', '/api/v1/tokens', {
        as,
        rawBody: body,
        headers: { 'content-type': 'application/json' },
      });
      expect({ try: i, status: r.status }).toEqual({ try: i, status: 413 });
      expectEnvelope(r.body, 'PAYLOAD_TOO_LARGE');
      expect(r.body.error.message).toBe(`request body exceeds the limit of ${LIMIT} bytes (ORDO_BODY_LIMIT_BYTES)`);
      expect(r.headers.get('connection')).toBe('close');
    }
  });

  it('answers a body far over the limit, sent slowly, with a 413 after reading it, and no reset', async () => {
    const size = 2 * 1024 * 1024;
    for (let i = 0; i < 5; i++) {
      const r = await exchange(
        app.url,
        [
          `POST /api/v1/tokens HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${as.token}\r\nX-Tenant-Id: ${as.tenantId}\r\n` +
            `Content-Type: application/json\r\nContent-Length: ${size}\r\n\r\n`,
          ...Array.from({ length: 32 }, () => Buffer.alloc(size / 32, 0x20)),
        ],
        { pauseMs: 10 },
      );
      expect({ try: i, status: r.status, reset: r.reset }).toEqual({ try: i, status: 413, reset: undefined });
      expectEnvelope(r.body, 'PAYLOAD_TOO_LARGE');
    }
  });

  it('answers a chunked upload without Content-Length over the limit with 413 in the envelope', async () => {
    const chunk = (s: string) => `${Buffer.byteLength(s).toString(16)}\r\n${s}\r\n`;
    const r = await exchange(
      app.url,
      [
        `POST /api/v1/tokens HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${as.token}\r\nX-Tenant-Id: ${as.tenantId}\r\n` +
          'Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n',
        chunk(`{"scopes":["orchestrator:read"],"description":"`),
        ...Array.from({ length: 16 }, () => chunk('y'.repeat(1024))),
        chunk('"}'),
        '0\r\n\r\n',
      ],
      { pauseMs: 2 },
    );
    expect({ status: r.status, reset: r.reset }).toEqual({ status: 413, reset: undefined });
    expect(r.headers.connection).toBe('close');
    expectEnvelope(r.body, 'PAYLOAD_TOO_LARGE');
    expect((r.body as { error: { message: string } }).error.message).toContain(
      `${LIMIT} bytes (ORDO_BODY_LIMIT_BYTES)`,
    );

    // The same through fetch, streaming a body of unknown length.
    const parts = [
      `{"scopes":["orchestrator:read"],"description":"`,
      ...Array<string>(16).fill('z'.repeat(1024)),
      '"}',
    ];
    const stream = new ReadableStream<Uint8Array>({
      pull(controller) {
        const next = parts.shift();
        if (next === undefined) controller.close();
        else controller.enqueue(Buffer.from(next));
      },
    });
    const res = await fetch(`${app.url}/api/v1/tokens`, {
      method: 'POST',
      headers: { authorization: `Bearer ${as.token}`, 'x-tenant-id': as.tenantId, 'content-type': 'application/json' },
      body: stream,
      duplex: 'half',
    });
    expect(res.status).toBe(413);
    expectEnvelope(await res.json(), 'PAYLOAD_TOO_LARGE');
  });

  it('names the line and column where a malformed JSON body breaks', async () => {
    const cases: [string, string][] = [
      ['{"scopes":\n  tru}', 'expected "true", found "}" at line 2, column 6'],
      ['{"scopes": ["orchestrator:read"]', 'unexpected end of input at line 1, column 33'],
      ['{"scopes": []}}', `expected the end of input after the JSON value, found "}" at line 1, column 15`],
    ];
    for (const [raw, where] of cases) {
      const r = await app.request('POST', '/api/v1/tokens', {
        as,
        rawBody: raw,
        headers: { 'content-type': 'application/json' },
      });
      expect(r.status).toBe(400);
      expectEnvelope(r.body, 'MALFORMED_JSON');
      expect(r.body.error.message).toBe(`request body is not valid JSON: ${where}`);
    }
    const proto = await app.request('POST', '/api/v1/tokens', {
      as,
      rawBody: '{"scopes":["orchestrator:read"],"__proto__":{"admin":true}}',
      headers: { 'content-type': 'application/json' },
    });
    expectEnvelope(proto.body, 'MALFORMED_JSON');
    expect(proto.body.error.message).toContain('__proto__');
  });

  it("answers the router's refusals in the envelope: an overlong path parameter (414), bad percent-encoding (400)", async () => {
    const long = await app.request('GET', `/api/v1/dags/${'a'.repeat(5000)}`, { as });
    expect(long.status).toBe(414);
    expectEnvelope(long.body, 'PATH_PARAMETER_TOO_LONG');
    const bad = await app.request('GET', '/api/v1/dags/%E0%A4%A', { as });
    expect(bad.status).toBe(400);
    expectEnvelope(bad.body, 'MALFORMED_URL');
  });

  it('keeps serving ordinary requests after refusing all of the above', async () => {
    const r = await app.request('GET', '/healthz');
    expect(r.status).toBe(200);
  });
});
