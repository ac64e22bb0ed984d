import { errorEnvelopeSchema } from '../../src/core/errors/error-envelope';
import { startTestApp, type TestApp, type TestResponse } from '../support/test-app';

const LIMIT = 2048;

describe('error envelope and input validation', () => {
  let app: TestApp;
  const as = () => ({ token: app.adminToken, tenantId: app.tenantId });
  const tokenCount = async () => {
    const r = await app.testDb.db.withTenant(app.tenantId, (tx) =>
      tx
        .selectFrom('api_token')
        .select((eb) => eb.fn.countAll<number>().as('n'))
        .executeTakeFirstOrThrow(),
    );
    return Number(r.n);
  };
  const tenantCount = async () => {
    const r = await app.testDb.db.system
      .selectFrom('tenant')
      .select((eb) => eb.fn.countAll<number>().as('n'))
      .executeTakeFirstOrThrow();
    return Number(r.n);
  };
  /** The response is the one error envelope with this status and code. */
  const expectError = (r: TestResponse, status: number, code: string) => {
    expect({ status: r.status, code: r.body?.error?.code }).toEqual({ status, code });
    expect(errorEnvelopeSchema.safeParse(r.body).success).toBe(true);
    expect(Object.keys(r.body as object)).toEqual(['error']);
    expect(r.body.error.message).toEqual(expect.any(String));
    expect(r.body.error.traceId).toMatch(/^[0-9a-f]{32}$/);
    expect(r.headers.get('content-type')).toMatch(/^application\/json/);
  };

  beforeAll(async () => {
    app = await startTestApp({ ORDO_BODY_LIMIT_BYTES: String(LIMIT) });
  });
  afterAll(async () => app.close());

  it('answers malformed JSON with 400 MALFORMED_JSON and writes nothing', async () => {
    const before = await tokenCount();
    for (const raw of ['{bad', '{"scopes": ["orchestrator:read"]', '', 'null garbage']) {
      const r = await app.request('POST', '/api/v1/tokens', {
        as: as(),
        rawBody: raw,
        headers: { 'content-type': 'application/json' },
      });
      expectError(r, 400, 'MALFORMED_JSON');
    }
    expect(await tokenCount()).toBe(before);
  });

  it('answers wrong types and unknown fields with 400 VALIDATION_FAILED naming the field', async () => {
    const before = await tenantCount();
    const cases: [unknown, string][] = [
      [{ id: 42, name: 'x' }, 'body.id'],
      [{ id: 'ok', name: ['x'] }, 'body.name'],
      [{ id: 'ok', name: 'x', plan: 'gold' }, 'body'],
      [[], 'body'],
      ['just a string', 'body'],
    ];
    for (const [body, field] of cases) {
      const r = await app.request('POST', '/api/v1/tenants', { as: { token: app.platformToken }, body });
      expectError(r, 400, 'VALIDATION_FAILED');
      expect(r.body.error.message.startsWith(`${field}:`)).toBe(true);
      expect(r.body.error.details.issues[0].path).toBe(field);
    }
    const unknown = await app.request('POST', '/api/v1/tenants', {
      as: { token: app.platformToken },
      body: { id: 'ok', name: 'x', plan: 'gold' },
    });
    expect(unknown.body.error.message).toContain('plan');
    expect(await tenantCount()).toBe(before);
  });

  it('answers 400 VALIDATION_FAILED for bad query parameters, naming them', async () => {
    const r = await app.request('GET', '/api/v1/tokens?limit=abc', { as: as() });
    expectError(r, 400, 'VALIDATION_FAILED');
    expect(r.body.error.message).toMatch(/^query\.limit/);
    const extra = await app.request('GET', '/api/v1/tokens?sort=desc', { as: as() });
    expectError(extra, 400, 'VALIDATION_FAILED');
    expect(extra.body.error.message).toContain('sort');
  });

  it('reads an integer in the query or the path only from decimal digits: empty, hex, exponent, fraction and blank are 400', async () => {
    for (const v of ['', '%20', '0x10', '1e1', '1.0', '+5', '-0', '10%20']) {
      const r = await app.request('GET', `/api/v1/tokens?limit=${v}`, { as: as() });
      expectError(r, 400, 'VALIDATION_FAILED');
      expect(r.body.error.message).toMatch(/^query\.limit: expected an integer/);
    }
    const runs = await app.request('GET', '/api/v1/runs?limit=', { as: as() });
    expectError(runs, 400, 'VALIDATION_FAILED');
    const version = await app.request('GET', '/api/v1/dags/some-dag/versions/0x1', { as: as() });
    expectError(version, 400, 'VALIDATION_FAILED');
    expect(version.body.error.message).toMatch(/^path\.version: expected an integer/);
    // Digits are read, and bounds still hold.
    expect((await app.request('GET', '/api/v1/tokens?limit=007', { as: as() })).status).toBe(200);
    expectError(await app.request('GET', '/api/v1/tokens?limit=501', { as: as() }), 400, 'VALIDATION_FAILED');
  });

  it('answers a body over ORDO_BODY_LIMIT_BYTES with 413 PAYLOAD_TOO_LARGE and writes nothing', async () => {
    const before = await tokenCount();
    const r = await app.request('POST', '/api/v1/tokens', {
      as: as(),
      body: { scopes: ['orchestrator:read'], description: 'x'.repeat(LIMIT) },
    });
    expectError(r, 413, 'PAYLOAD_TOO_LARGE');
    // Just under the limit is accepted.
    const ok = await app.request('POST', '/api/v1/tokens', {
      as: as(),
      body: { scopes: ['orchestrator:read'], description: 'x'.repeat(400) },
    });
    expect(ok.status).toBe(201);
    expect(await tokenCount()).toBe(before + 1);
  });

  it('answers unknown routes with 404 ROUTE_NOT_FOUND, authenticated or not', async () => {
    expectError(await app.request('GET', '/api/v1/no-such-thing'), 404, 'ROUTE_NOT_FOUND');
    expectError(await app.request('GET', '/api/v1/no-such-thing', { as: as() }), 404, 'ROUTE_NOT_FOUND');
    expectError(await app.request('POST', '/nope', { body: {} }), 404, 'ROUTE_NOT_FOUND');
    expectError(await app.request('DELETE', '/api/v1/tokens', { as: as() }), 404, 'ROUTE_NOT_FOUND');
  });

  it('answers an unsupported content type with 415 UNSUPPORTED_MEDIA_TYPE and writes nothing', async () => {
    const before = await tokenCount();
    for (const ct of ['text/plain', 'application/xml', 'multipart/form-data; boundary=x']) {
      const r = await app.request('POST', '/api/v1/tokens', {
        as: as(),
        rawBody: 'scopes=orchestrator:read',
        headers: { 'content-type': ct },
      });
      expectError(r, 415, 'UNSUPPORTED_MEDIA_TYPE');
    }
    expect(await tokenCount()).toBe(before);
  });

  it('answers a missing body with 400 and a body on a bodiless route with 400 UNEXPECTED_BODY', async () => {
    const missing = await app.request('POST', '/api/v1/tokens', { as: as() });
    expect(missing.status).toBe(400);
    expectError(missing, 400, missing.body.error.code as string);
    const unexpected = await app.request('POST', '/api/v1/tokens/00000000-0000-4000-8000-000000000000/revoke', {
      as: as(),
      body: { reason: 'x' },
    });
    expectError(unexpected, 400, 'UNEXPECTED_BODY');
  });

  it('carries the W3C traceparent trace id into the envelope', async () => {
    const traceId = '4bf92f3577b34da6a3ce929d0e0e4736';
    const r = await app.request('GET', '/api/v1/no-such-thing', {
      headers: { traceparent: `00-${traceId}-00f067aa0ba902b7-01` },
    });
    expect(r.body.error.traceId).toBe(traceId);
  });
});
