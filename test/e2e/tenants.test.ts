import { startTestApp, type TestApp } from '../support/test-app';

describe('tenants API (platform operators)', () => {
  let app: TestApp;
  const op = () => ({ token: app.platformToken });

  beforeAll(async () => {
    app = await startTestApp();
  });
  afterAll(async () => app.close());

  it('creates a tenant (201) and answers 409 TENANT_EXISTS for a duplicate id', async () => {
    const r = await app.request('POST', '/api/v1/tenants', { as: op(), body: { id: 'acme', name: 'Acme Inc' } });
    expect(r.status).toBe(201);
    expect(r.body).toMatchObject({ id: 'acme', name: 'Acme Inc', status: 'active', disabledAt: null });
    const dup = await app.request('POST', '/api/v1/tenants', { as: op(), body: { id: 'acme', name: 'Other' } });
    expect(dup.status).toBe(409);
    expect(dup.body.error.code).toBe('TENANT_EXISTS');
  });

  it('rejects invalid tenant bodies with 400 naming the field and creates nothing', async () => {
    for (const body of [
      { id: 'Bad Id', name: 'x' },
      { id: 'ok-id' },
      { id: 'ok-id', name: 'x', extra: 1 },
      { id: 'a'.repeat(64), name: 'x' },
    ]) {
      const r = await app.request('POST', '/api/v1/tenants', { as: op(), body });
      expect(r.status).toBe(400);
      expect(r.body.error.code).toBe('VALIDATION_FAILED');
      expect(r.body.error.message).toMatch(/^body/);
    }
    const list = await app.request('GET', '/api/v1/tenants?limit=500', { as: op() });
    expect((list.body.items as { id: string }[]).map((t) => t.id)).not.toContain('ok-id');
  });

  it('lists tenants by id in keyset pages, each once', async () => {
    for (const id of ['page-1', 'page-2', 'page-3', 'page-4', 'page-5']) {
      expect((await app.request('POST', '/api/v1/tenants', { as: op(), body: { id, name: id } })).status).toBe(201);
    }
    const all = await app.request('GET', '/api/v1/tenants?limit=500', { as: op() });
    const expected = (all.body.items as { id: string }[]).map((t) => t.id);
    expect(expected).toEqual([...expected].sort());
    const seen: string[] = [];
    let pageToken: string | null = null;
    let pages = 0;
    do {
      const url: string = `/api/v1/tenants?limit=2${pageToken ? `&pageToken=${pageToken}` : ''}`;
      const r = await app.request('GET', url, { as: op() });
      expect(r.status).toBe(200);
      seen.push(...(r.body.items as { id: string }[]).map((t) => t.id));
      pageToken = r.body.nextPageToken as string | null;
      pages++;
    } while (pageToken && pages < 50);
    expect(seen).toEqual(expected);
    expect(pages).toBe(Math.ceil(expected.length / 2));
    const bad = await app.request('GET', '/api/v1/tenants?pageToken=%7B', { as: op() });
    expect(bad.status).toBe(400);
    expect(bad.body.error.code).toBe('INVALID_PAGE_TOKEN');
    const limit = await app.request('GET', '/api/v1/tenants?limit=0', { as: op() });
    expect(limit.status).toBe(400);
  });

  it('disables and enables a tenant; unknown tenants are 404', async () => {
    await app.request('POST', '/api/v1/tenants', { as: op(), body: { id: 'flip', name: 'flip' } });
    const d = await app.request('POST', '/api/v1/tenants/flip/disable', { as: op() });
    expect(d.status).toBe(200);
    expect(d.body).toMatchObject({ id: 'flip', status: 'disabled' });
    expect(d.body.disabledAt).toEqual(expect.any(String));
    const e = await app.request('POST', '/api/v1/tenants/flip/enable', { as: op() });
    expect(e.status).toBe(200);
    expect(e.body).toMatchObject({ id: 'flip', status: 'active', disabledAt: null });
    for (const action of ['disable', 'enable']) {
      const r = await app.request('POST', `/api/v1/tenants/nope/${action}`, { as: op() });
      expect(r.status).toBe(404);
    }
  });

  it('mints a token for a tenant that works on its tenant routes; unknown tenant is 404', async () => {
    await app.request('POST', '/api/v1/tenants', { as: op(), body: { id: 'minted', name: 'minted' } });
    const r = await app.request('POST', '/api/v1/tenants/minted/tokens', {
      as: op(),
      body: { scopes: ['orchestrator:admin'] },
    });
    expect(r.status).toBe(201);
    expect(r.body).toMatchObject({ tenantId: 'minted', subject: 'minted-admin', scopes: ['orchestrator:admin'] });
    const use = await app.request('GET', '/api/v1/tokens', {
      as: { token: r.body.token as string, tenantId: 'minted' },
    });
    expect(use.status).toBe(200);
    expect((use.body.items as { jti: string; createdBy: string }[])[0]).toMatchObject({
      jti: r.body.jti,
      createdBy: 'platform:operator',
    });
    const missing = await app.request('POST', '/api/v1/tenants/nope/tokens', {
      as: op(),
      body: { scopes: ['orchestrator:read'] },
    });
    expect(missing.status).toBe(404);
  });

  it('refuses tenant tokens (403) and missing tokens (401) on every platform route', async () => {
    const as = { token: app.adminToken, tenantId: app.tenantId };
    const routes: [string, string, unknown?][] = [
      ['POST', '/api/v1/tenants', { id: 'sneaky', name: 'x' }],
      ['GET', '/api/v1/tenants'],
      ['POST', `/api/v1/tenants/${app.tenantId}/disable`],
      ['POST', `/api/v1/tenants/${app.tenantId}/enable`],
      ['POST', `/api/v1/tenants/${app.tenantId}/tokens`, { scopes: ['orchestrator:admin'] }],
    ];
    for (const [method, url, body] of routes) {
      const forbidden = await app.request(method, url, { as, body });
      expect({ url, status: forbidden.status }).toEqual({ url, status: 403 });
      const anonymous = await app.request(method, url, { body });
      expect({ url, status: anonymous.status }).toEqual({ url, status: 401 });
    }
    const list = await app.request('GET', '/api/v1/tenants?limit=500', { as: op() });
    expect((list.body.items as { id: string; status: string }[]).find((t) => t.id === app.tenantId)?.status).toBe(
      'active',
    );
    expect((list.body.items as { id: string }[]).map((t) => t.id)).not.toContain('sneaky');
  });
});
