import { startTestApp, type TestApp } from '../support/test-app';

describe('authentication and tenant scoping', () => {
  let app: TestApp;
  beforeAll(async () => {
    app = await startTestApp();
  });
  afterAll(async () => app.close());

  it('returns 401 with the error envelope when no token is sent', async () => {
    const r = await app.request('GET', '/api/v1/tokens', { headers: { 'x-tenant-id': app.tenantId } });
    expect(r.status).toBe(401);
    expect(r.body.error.code).toBe('UNAUTHENTICATED');
    expect(r.body.error.traceId).toMatch(/^[0-9a-f]{32}$/);
  });

  it('returns 403 when the token belongs to another tenant than X-Tenant-Id', async () => {
    const b = await app.tenant('tenant-b');
    const r = await app.request('GET', '/api/v1/tokens', { as: { token: b.token, tenantId: app.tenantId } });
    expect(r.status).toBe(403);
    expect(r.body.error.code).toBe('TENANT_MISMATCH');
  });
});

describe('malformed input', () => {
  let app: TestApp;
  beforeAll(async () => {
    app = await startTestApp();
  });
  afterAll(async () => app.close());

  it('answers malformed JSON with 400 MALFORMED_JSON', async () => {
    const r = await app.request('POST', '/api/v1/tokens', {
      as: { token: app.adminToken, tenantId: app.tenantId },
      rawBody: '{bad',
      headers: { 'content-type': 'application/json' },
    });
    expect(r.status).toBe(400);
    expect(r.body.error.code).toBe('MALFORMED_JSON');
  });
});
