import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { closeTestSandboxes, pluginContext, testSandbox } from '../../src/modules/sandbox/testing/plugin-context';
import plugin, { statusMatches } from './index';

describe('http plugin', () => {
  let server: http.Server;
  let base = '';
  let egress: string[] = [];
  let seen: { method?: string; url?: string; headers: http.IncomingHttpHeaders; body: string }[] = [];

  beforeAll(async () => {
    server = http.createServer((req, res) => {
      let body = '';
      req.on('data', (c: Buffer) => (body += c.toString()));
      req.on('end', () => {
        seen.push({ method: req.method, url: req.url, headers: req.headers, body });
        const u = new URL(req.url!, 'http://x');
        const status = Number(u.searchParams.get('status') ?? 200);
        switch (u.pathname) {
          case '/json':
            res
              .writeHead(status, { 'content-type': 'application/json', 'x-extra': 'yes' })
              .end(JSON.stringify({ hello: 'world', n: 1 }));
            return;
          case '/echo':
            res
              .writeHead(status, { 'content-type': 'application/json' })
              .end(JSON.stringify({ method: req.method, body, ct: req.headers['content-type'] }));
            return;
          case '/big':
            res.writeHead(200, { 'content-type': 'text/plain' }).end('x'.repeat(5000));
            return;
          case '/big-chunked':
            res.writeHead(200, { 'content-type': 'text/plain' });
            for (let i = 0; i < 10; i++) res.write('y'.repeat(1000));
            res.end();
            return;
          case '/slow':
            setTimeout(() => res.end('late'), 2000).unref();
            return;
          case '/bad-json':
            res.writeHead(200, { 'content-type': 'application/json' }).end('{nope');
            return;
          default:
            res.writeHead(status, { 'content-type': 'text/plain' }).end(`text ${u.searchParams.get('token') ?? ''}`);
        }
      });
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const port = (server.address() as AddressInfo).port;
    base = `http://127.0.0.1:${port}`;
    egress = [`127.0.0.1:${port}`];
  });
  afterAll(async () => {
    server.closeAllConnections();
    await new Promise((r) => server.close(r));
    await closeTestSandboxes();
  });
  beforeEach(() => (seen = []));

  const exec = (cfg: Record<string, unknown>, ctx = pluginContext({ egress })) =>
    plugin.execute(plugin.configSchema.parse(cfg), ctx);

  it('GETs JSON, returns status, selected headers and the parsed body, and sends traceparent', async () => {
    const ctx = pluginContext({ egress });
    const r = await exec({ url: `${base}/json`, outputHeaders: ['X-Extra'] }, ctx);
    expect(r).toEqual({
      status: 'succeeded',
      outputs: {
        status: 200,
        headers: expect.objectContaining({ 'content-type': 'application/json', 'x-extra': 'yes' }),
        body: { hello: 'world', n: 1 },
      },
    });
    expect(seen[0].headers.traceparent).toBe(ctx.traceparent);
    expect(ctx.lines[0].message).toMatch(/^GET http:\/\/127\.0\.0\.1:\d+\/json -> 200/);
  });

  it('sends a JSON body as JSON and a string body as text', async () => {
    const json = await exec({ method: 'POST', url: `${base}/echo`, body: { a: [1, 2] } });
    expect(json.outputs?.body).toEqual({ method: 'POST', body: '{"a":[1,2]}', ct: 'application/json' });
    const text = await exec({
      method: 'put',
      url: `${base}/echo`,
      body: 'plain',
      headers: { 'Content-Type': 'text/csv' },
    });
    expect(text.outputs?.body).toEqual({ method: 'PUT', body: 'plain', ct: 'text/csv' });
  });

  it('returns text for non-JSON responses and with responseType text', async () => {
    expect((await exec({ url: `${base}/plain` })).outputs?.body).toBe('text ');
    expect((await exec({ url: `${base}/json`, responseType: 'text' })).outputs?.body).toBe('{"hello":"world","n":1}');
  });

  it('fails with RESPONSE_NOT_JSON when responseType json gets something else', async () => {
    const r = await exec({ url: `${base}/bad-json`, responseType: 'json' });
    expect(r).toMatchObject({ status: 'failed', error: { code: 'RESPONSE_NOT_JSON', retryable: false } });
  });

  it('fails 4xx without retry and 5xx with retry, keeping status and body in the outputs', async () => {
    const notFound = await exec({ url: `${base}/json?status=404` });
    expect(notFound).toMatchObject({
      status: 'failed',
      error: { code: 'HTTP_STATUS', retryable: false },
      outputs: { status: 404 },
    });
    const unavailable = await exec({ url: `${base}/json?status=503` });
    expect(unavailable).toMatchObject({
      status: 'failed',
      error: { code: 'HTTP_STATUS', retryable: true },
      outputs: { status: 503 },
    });
  });

  it('accepts the statuses listed in expectStatus', async () => {
    expect(await exec({ url: `${base}/json?status=404`, expectStatus: [404] })).toMatchObject({ status: 'succeeded' });
    expect(await exec({ url: `${base}/json?status=201`, expectStatus: ['200-204'] })).toMatchObject({
      status: 'succeeded',
    });
    expect(await exec({ url: `${base}/json?status=201`, expectStatus: ['200'] })).toMatchObject({ status: 'failed' });
    expect(statusMatches(302, ['3xx'])).toBe(true);
    expect(statusMatches(302, ['2xx', 404])).toBe(false);
  });

  it('aborts a response larger than maxResponseBytes with RESPONSE_TOO_LARGE', async () => {
    for (const path of ['/big', '/big-chunked']) {
      const r = await exec({ url: `${base}${path}`, maxResponseBytes: 2048 });
      expect(r).toMatchObject({ status: 'failed', error: { code: 'RESPONSE_TOO_LARGE', retryable: false } });
    }
    expect(await exec({ url: `${base}/big`, maxResponseBytes: 5000 })).toMatchObject({ status: 'succeeded' });
  });

  it('times out with a retryable TIMEOUT', async () => {
    const r = await exec({ url: `${base}/slow`, timeoutMs: 200 });
    expect(r).toMatchObject({ status: 'failed', error: { code: 'TIMEOUT', retryable: true } });
  });

  it('stops with ABORTED when the step is cancelled', async () => {
    const ctx = pluginContext({ egress });
    setTimeout(() => ctx.controller.abort(), 100);
    const r = await exec({ url: `${base}/slow` }, ctx);
    expect(r).toMatchObject({ status: 'failed', error: { code: 'ABORTED', retryable: false } });
  });

  it('reports a refused connection as a retryable NETWORK_ERROR', async () => {
    const closed = http.createServer();
    await new Promise<void>((r) => closed.listen(0, '127.0.0.1', r));
    const port = (closed.address() as AddressInfo).port;
    await new Promise((r) => closed.close(r));
    const r = await exec({ url: `http://127.0.0.1:${port}/` }, pluginContext({ egress: [`127.0.0.1:${port}`] }));
    expect(r).toMatchObject({ status: 'failed', error: { code: 'NETWORK_ERROR', retryable: true } });
  });

  it('denies hosts outside the egress list, with no egress, and metadata addresses, without sending anything', async () => {
    expect(await exec({ url: `${base}/json` }, pluginContext())).toMatchObject({
      status: 'failed',
      error: { code: 'EGRESS_DENIED', retryable: false },
    });
    expect(await exec({ url: `${base}/json` }, pluginContext({ egress: ['127.0.0.1:1'] }))).toMatchObject({
      error: { code: 'EGRESS_DENIED' },
    });
    expect(
      await exec(
        { url: 'http://169.254.169.254/latest/meta-data/' },
        pluginContext({ egress: ['*.254', 'metadata.google.internal'] }),
      ),
    ).toMatchObject({
      error: { code: 'EGRESS_DENIED' },
    });
    expect(
      await exec({ url: 'http://localhost:' + base.split(':')[2] + '/json' }, pluginContext({ egress: ['localhost'] })),
    ).toMatchObject({
      error: { code: 'EGRESS_DENIED' },
    });
    expect(seen).toHaveLength(0);
  });

  it('denies a loopback address the step names by its literal when the operator lists no private range', async () => {
    const r = await exec(
      { url: `${base}/json` },
      pluginContext({ egress, sandbox: testSandbox({ allowPrivate: [] }) }),
    );
    expect(r).toMatchObject({
      status: 'failed',
      error: { code: 'EGRESS_DENIED', message: expect.stringContaining('ORDO_EGRESS_ALLOW_PRIVATE') },
    });
    expect(seen).toHaveLength(0);
  });

  it('redacts secret values from logs, error messages and outputs', async () => {
    const ctx = pluginContext({ egress, secrets: ['s3cr3t-value'] });
    const r = await exec({ url: `${base}/plain?status=500&token=s3cr3t-value` }, ctx);
    expect(seen[0].url).toContain('s3cr3t-value');
    const everything = JSON.stringify([r, ctx.lines]);
    expect(everything).not.toContain('s3cr3t-value');
    expect(everything).toContain('[redacted]');
  });

  it('refuses a header value with a line break as INVALID_REQUEST without retry', async () => {
    const r = await exec({ url: `${base}/json`, headers: { 'x-injected': 'a\r\nx-evil: 1' } });
    expect(r).toMatchObject({ status: 'failed', error: { code: 'INVALID_REQUEST', retryable: false } });
    expect(seen).toHaveLength(0);
  });

  it('redacts inside the JSON body without breaking it, even when a secret spans JSON syntax', async () => {
    const ctx = pluginContext({ egress, secrets: ['","'] });
    const r = await exec({ method: 'POST', url: `${base}/echo`, body: 'x' }, ctx);
    expect(r.status).toBe('succeeded');
    expect(r.outputs?.body).toEqual({ method: 'POST', body: 'x', ct: 'text/plain; charset=utf-8' });
  });

  it('accepts template strings in numeric fields at publish time', () => {
    expect(
      plugin.configSchema.safeParse({
        url: '${{ inputs.url }}',
        timeoutMs: '${{ inputs.t }}',
        method: '${{ inputs.m }}',
      }).success,
    ).toBe(true);
    expect(plugin.configSchema.safeParse({ url: 'x', method: 'TRACE' }).success).toBe(false);
    expect(plugin.configSchema.safeParse({ url: 'x', unknown: 1 }).success).toBe(false);
  });
});
