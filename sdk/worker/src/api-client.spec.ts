import net from 'node:net';
import { FakeOrdo } from '../test/fake-ordo';
import { ApiClient } from './api-client';
import { OrdoApiError, OrdoUnreachableError } from './errors';

/** A port nothing listens on: connections to it are refused. */
async function closedPort(): Promise<number> {
  const srv = net.createServer();
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  const port = (srv.address() as net.AddressInfo).port;
  await new Promise((r) => srv.close(r));
  return port;
}

describe('ApiClient', () => {
  let ordo: FakeOrdo;
  beforeEach(async () => {
    ordo = await new FakeOrdo().listen();
  });
  afterEach(() => ordo.close());

  const client = (urls: string[]) =>
    new ApiClient({ urls, token: ordo.token, tenantId: ordo.tenantId, backoff: { baseMs: 1, maxMs: 5 } });

  it('sends the bearer token and tenant header with a JSON body', async () => {
    const r = await client([ordo.url]).call('POST', '/api/v1/workers', { body: { name: 'w', taskTypes: [] } });
    expect(r.status).toBe(201);
    expect(ordo.requests[0].headers).toMatchObject({
      authorization: `Bearer ${ordo.token}`,
      'x-tenant-id': 'acme',
      'content-type': 'application/json',
    });
    expect(ordo.requests[0].headers['user-agent']).toMatch(/^ordo-worker-sdk\//);
  });

  it('moves to the next URL when the first refuses connections, and stays there', async () => {
    const c = client([`http://127.0.0.1:${await closedPort()}`, ordo.url]);
    const retries: string[] = [];
    const r = await c.call('POST', '/api/v1/workers', {
      body: { name: 'w', taskTypes: [] },
      onRetry: (_e, url) => retries.push(url),
    });
    expect(r.status).toBe(201);
    expect(retries).toHaveLength(1);
    expect(c.baseUrl).toBe(ordo.url);
  });

  it('retries a 503 and answers with the success that follows', async () => {
    ordo.failNext(/^\/api\/v1\/workers$/, 503, 'UNAVAILABLE', 2);
    const r = await client([ordo.url]).call<{ workerId: string }>('POST', '/api/v1/workers', {
      body: { name: 'w', taskTypes: [] },
    });
    expect(r.body!.workerId).toMatch(/-/);
    expect(ordo.requests.filter((x) => x.path === '/api/v1/workers')).toHaveLength(3);
  });

  it('rejects at once with the envelope code of a 4xx answer', async () => {
    const e = await new ApiClient({ urls: [ordo.url], token: 'another', tenantId: ordo.tenantId })
      .call('POST', '/api/v1/workers', { body: {} })
      .catch((x: unknown) => x);
    expect(e).toBeInstanceOf(OrdoApiError);
    expect(e).toMatchObject({ status: 401, code: 'UNAUTHENTICATED', traceId: 't' });
    expect(ordo.requests).toHaveLength(1);
  });

  it('gives up after its tries when no URL answers', async () => {
    const e = await client([`http://127.0.0.1:${await closedPort()}`])
      .call('GET', '/x', { tries: 3 })
      .catch((x: unknown) => x);
    expect(e).toBeInstanceOf(OrdoUnreachableError);
  });

  it('rejects with the abort reason when its signal aborts between tries', async () => {
    const c = new AbortController();
    const call = client([`http://127.0.0.1:${await closedPort()}`]).call('GET', '/x', {
      signal: c.signal,
      onRetry: () => c.abort(new Error('stopping')),
    });
    await expect(call).rejects.toThrow('stopping');
  });
});
