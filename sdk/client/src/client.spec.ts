import { createOrdoClient, OrdoApiError, retryAfterSeconds, tenantOfToken, toOrdoApiError, unwrap } from './index';

const envelope = (code: string, message: string, details?: unknown) =>
  JSON.stringify({ error: { code, message, traceId: 'trace-1', ...(details === undefined ? {} : { details }) } });

const json = (status: number, body: string, headers: Record<string, string> = {}) =>
  new Response(body, { status, headers: { 'content-type': 'application/json', ...headers } });

/** A token whose payload carries `tid` (unsigned: the client reads the claim, the server verifies). */
const tokenFor = (tid: string) =>
  ['e30', Buffer.from(JSON.stringify({ tid, sub: 'x' })).toString('base64url'), 'sig'].join('.');

describe('error mapping', () => {
  it('turns the error envelope into an OrdoApiError with code, message, status, traceId and details', () => {
    const e = toOrdoApiError(429, JSON.parse(envelope('QUOTA_EXCEEDED', 'over the quota', { limit: 'runs' })));
    expect(e).toBeInstanceOf(OrdoApiError);
    expect(e).toMatchObject({
      code: 'QUOTA_EXCEEDED',
      message: 'over the quota',
      status: 429,
      traceId: 'trace-1',
      details: { limit: 'runs' },
    });
  });

  it('gives an answer without an envelope the code HTTP_<status> and keeps the start of its text', () => {
    const e = toOrdoApiError(502, '<html>bad gateway</html>');
    expect(e).toMatchObject({ code: 'HTTP_502', status: 502, traceId: undefined });
    expect(e.message).toBe('HTTP 502: <html>bad gateway</html>');
    expect(toOrdoApiError(500, undefined).message).toBe('HTTP 500 without an error envelope');
    expect(toOrdoApiError(400, { error: { code: 7 } }).code).toBe('HTTP_400');
  });

  it('reads Retry-After as seconds or as an HTTP date', () => {
    expect(retryAfterSeconds('3')).toBe(3);
    expect(retryAfterSeconds('Thu, 01 Jan 2026 00:00:10 GMT', Date.parse('2026-01-01T00:00:00Z'))).toBe(10);
    expect(retryAfterSeconds('soon')).toBeUndefined();
    expect(retryAfterSeconds(null)).toBeUndefined();
    const e = toOrdoApiError(503, JSON.parse(envelope('UNAVAILABLE', 'later')), new Headers({ 'retry-after': '5' }));
    expect(e.retryAfterSeconds).toBe(5);
  });
});

describe('createOrdoClient', () => {
  const runId = '00000000-0000-4000-8000-000000000001';

  it('sends the bearer token and the token’s tenant, and unwrap throws the mapped error', async () => {
    const seen: Request[] = [];
    const client = createOrdoClient({
      baseUrl: 'http://ordo.test/',
      token: tokenFor('acme'),
      fetch: async (r) => {
        seen.push(r);
        return json(404, envelope('RUN_NOT_FOUND', `run ${runId} not found`));
      },
    });
    expect(client.tenantId).toBe('acme');
    const call = unwrap(client.api.GET('/api/v1/runs/{runId}', { params: { path: { runId } } }));
    await expect(call).rejects.toMatchObject({ name: 'OrdoApiError', code: 'RUN_NOT_FOUND', status: 404 });
    expect(seen[0].url).toBe(`http://ordo.test/api/v1/runs/${runId}`);
    expect(seen[0].headers.get('authorization')).toBe(`Bearer ${tokenFor('acme')}`);
    expect(seen[0].headers.get('x-tenant-id')).toBe('acme');
  });

  it('retries a 429 after its Retry-After, sending the same body again', async () => {
    const bodies: string[] = [];
    const client = createOrdoClient({
      baseUrl: 'http://ordo.test',
      token: tokenFor('acme'),
      retries: 2,
      fetch: async (r) => {
        bodies.push(await r.text());
        return bodies.length === 1
          ? json(429, envelope('QUOTA_EXCEEDED', 'wait'), { 'retry-after': '0' })
          : json(201, JSON.stringify({ runId, created: true, status: 'queued', traceId: 't' }));
      },
    });
    const created = await unwrap(
      client.api.POST('/api/v1/runs', { body: { dagId: 'etl', inputs: {}, runToken: 'r1' } }),
    );
    expect(created).toMatchObject({ runId, created: true });
    expect(bodies).toHaveLength(2);
    expect(bodies[1]).toBe(bodies[0]);
  });

  it('sends to the next address when one cannot be reached, then keeps to the one that answered', async () => {
    const hosts: string[] = [];
    const client = createOrdoClient({
      baseUrl: ['http://down.test', 'http://up.test'],
      tenantId: 'acme',
      fetch: async (r) => {
        const host = new URL(r.url).host;
        hosts.push(host);
        if (host === 'down.test') throw new TypeError('fetch failed');
        return json(200, JSON.stringify({ items: [], nextPageToken: null }));
      },
    });
    await unwrap(client.api.GET('/api/v1/dags'));
    await unwrap(client.api.GET('/api/v1/dags'));
    expect(hosts).toEqual(['down.test', 'up.test', 'up.test']);
    expect(client.baseUrl).toBe('http://up.test');
  });

  it('reads no tenant from a token without a tid claim', () => {
    expect(tenantOfToken('not-a-jwt')).toBeUndefined();
    expect(tenantOfToken(undefined)).toBeUndefined();
    expect(tenantOfToken(tokenFor('b'))).toBe('b');
  });
});
