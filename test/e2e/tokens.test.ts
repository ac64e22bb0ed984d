import pg from 'pg';
import { startTestApp, type TestApp } from '../support/test-app';

describe('tenant tokens API', () => {
  let app: TestApp;
  let a: { tenantId: string; token: string };
  let b: { tenantId: string; token: string };
  const asA = () => ({ token: a.token, tenantId: a.tenantId });
  const asB = () => ({ token: b.token, tenantId: b.tenantId });

  beforeAll(async () => {
    app = await startTestApp();
    a = await app.tenant('tok-a');
    b = await app.tenant('tok-b');
  });
  afterAll(async () => app.close());

  const countTokens = async (tenantId: string) => {
    const r = await app.testDb.db.withTenant(tenantId, (tx) =>
      tx
        .selectFrom('api_token')
        .select((eb) => eb.fn.countAll<number>().as('n'))
        .executeTakeFirstOrThrow(),
    );
    return Number(r.n);
  };

  it('mints a token (201) that is listed without its secret, newest first', async () => {
    const r = await app.request('POST', '/api/v1/tokens', {
      as: asA(),
      body: { scopes: ['orchestrator:read'], description: 'ci' },
    });
    expect(r.status).toBe(201);
    const l = await app.request('GET', '/api/v1/tokens', { as: asA() });
    expect(l.status).toBe(200);
    expect(l.body.items[0]).toMatchObject({
      jti: r.body.jti,
      scopes: ['orchestrator:read'],
      description: 'ci',
      revokedAt: null,
    });
    expect(JSON.stringify(l.body)).not.toContain(r.body.token);
  });

  it('pages the token list with a keyset pageToken, every token once', async () => {
    for (let i = 0; i < 5; i++) {
      expect(
        (await app.request('POST', '/api/v1/tokens', { as: asA(), body: { scopes: ['orchestrator:read'] } })).status,
      ).toBe(201);
    }
    const total = await countTokens(a.tenantId);
    const seen: string[] = [];
    let pageToken: string | null = null;
    let pages = 0;
    do {
      const q: string = `?limit=2${pageToken ? `&pageToken=${encodeURIComponent(pageToken)}` : ''}`;
      const r = await app.request('GET', `/api/v1/tokens${q}`, { as: asA() });
      expect(r.status).toBe(200);
      expect(r.body.items.length).toBeLessThanOrEqual(2);
      seen.push(...(r.body.items as { jti: string }[]).map((t) => t.jti));
      pageToken = r.body.nextPageToken as string | null;
      pages++;
    } while (pageToken && pages < 20);
    expect(seen).toHaveLength(total);
    expect(new Set(seen).size).toBe(total);
    expect(pages).toBe(Math.ceil(total / 2));
  });

  it('pages without skipping tokens created within the same millisecond', async () => {
    const c = await app.tenant('tok-micro');
    const as = { token: c.token, tenantId: c.tenantId };
    for (let i = 0; i < 3; i++)
      await app.request('POST', '/api/v1/tokens', { as, body: { scopes: ['orchestrator:read'] } });
    // Place every token of the tenant a few microseconds apart inside one millisecond (as the owner).
    const owner = new pg.Client({ connectionString: app.testDb.ownerUrl });
    await owner.connect();
    await owner.query(
      `update api_token t set created_at = timestamptz '2026-01-01 00:00:00.123000+00' + make_interval(secs => n.rn / 1e6)
         from (select jti, row_number() over (order by jti) as rn from api_token where tenant_id = $1) n
        where t.tenant_id = $1 and t.jti = n.jti`,
      [c.tenantId],
    );
    await owner.end();
    const seen: string[] = [];
    let pageToken: string | null = null;
    for (let i = 0; i < 10; i++) {
      const r = await app.request('GET', `/api/v1/tokens?limit=1${pageToken ? `&pageToken=${pageToken}` : ''}`, { as });
      seen.push(...(r.body.items as { jti: string }[]).map((t) => t.jti));
      pageToken = r.body.nextPageToken as string | null;
      if (!pageToken) break;
    }
    expect(seen).toHaveLength(4);
    expect(new Set(seen).size).toBe(4);
  });

  it('rejects a forged pageToken with 400 INVALID_PAGE_TOKEN', async () => {
    for (const t of ['garbage', Buffer.from('{"c":"x","j":"y"}').toString('base64url')]) {
      const r = await app.request('GET', `/api/v1/tokens?pageToken=${t}`, { as: asA() });
      expect(r.status).toBe(400);
      expect(r.body.error.code).toBe('INVALID_PAGE_TOKEN');
    }
  });

  it('revokes idempotently: a second revoke answers 200 with the first time', async () => {
    const m = await app.request('POST', '/api/v1/tokens', { as: asA(), body: { scopes: ['orchestrator:admin'] } });
    const first = await app.request('POST', `/api/v1/tokens/${m.body.jti}/revoke`, { as: asA() });
    expect(first.status).toBe(200);
    expect(first.body.jti).toBe(m.body.jti);
    const again = await app.request('POST', `/api/v1/tokens/${m.body.jti}/revoke`, { as: asA() });
    expect(again.status).toBe(200);
    expect(again.body.revokedAt).toBe(first.body.revokedAt);
    const used = await app.request('GET', '/api/v1/tokens', {
      as: { token: m.body.token as string, tenantId: a.tenantId },
    });
    expect(used.status).toBe(401);
  });

  it('answers 404 for revoking an unknown jti and 400 for a malformed one', async () => {
    const r = await app.request('POST', '/api/v1/tokens/00000000-0000-4000-8000-000000000000/revoke', { as: asA() });
    expect(r.status).toBe(404);
    expect(r.body.error.code).toBe('NOT_FOUND');
    const bad = await app.request('POST', '/api/v1/tokens/not-a-uuid/revoke', { as: asA() });
    expect(bad.status).toBe(400);
    expect(bad.body.error.code).toBe('VALIDATION_FAILED');
  });

  it("tenant B cannot list or revoke tenant A's tokens: revoking A's jti as B is 404 and A's token still works", async () => {
    const m = await app.request('POST', '/api/v1/tokens', { as: asA(), body: { scopes: ['orchestrator:admin'] } });
    const listB = await app.request('GET', '/api/v1/tokens?limit=500', { as: asB() });
    expect(listB.status).toBe(200);
    const jtisB = (listB.body.items as { jti: string }[]).map((t) => t.jti);
    expect(jtisB).not.toContain(m.body.jti);
    expect(jtisB.length).toBeGreaterThan(0);

    const rv = await app.request('POST', `/api/v1/tokens/${m.body.jti}/revoke`, { as: asB() });
    expect(rv.status).toBe(404);
    expect(rv.body.error.code).toBe('NOT_FOUND');
    const still = await app.request('GET', '/api/v1/tokens', {
      as: { token: m.body.token as string, tenantId: a.tenantId },
    });
    expect(still.status).toBe(200);
    // B's own token in A's name is a tenant mismatch, not a way in.
    expect((await app.request('GET', '/api/v1/tokens', { as: { token: b.token, tenantId: a.tenantId } })).status).toBe(
      403,
    );
  });

  it('rejects bad mint bodies with 400 VALIDATION_FAILED naming the field, and writes nothing', async () => {
    const before = await countTokens(a.tenantId);
    const cases: [unknown, string][] = [
      [{ scopes: ['orchestrator:root'] }, 'body.scopes.0'],
      [{ scopes: [] }, 'body.scopes'],
      [{ scopes: 'orchestrator:read' }, 'body.scopes'],
      [{ scopes: ['orchestrator:read'], ttlSeconds: 'soon' }, 'body.ttlSeconds'],
      [{ scopes: ['orchestrator:read'], ttlSeconds: 5 }, 'body.ttlSeconds'],
      [{ scopes: ['orchestrator:read'], admin: true }, 'body'],
      [{ scopes: ['orchestrator:read'], subject: 'has space' }, 'body.subject'],
    ];
    for (const [body, field] of cases) {
      const r = await app.request('POST', '/api/v1/tokens', { as: asA(), body });
      expect({ body, status: r.status, code: r.body.error.code }).toEqual({
        body,
        status: 400,
        code: 'VALIDATION_FAILED',
      });
      expect(r.body.error.message.startsWith(field)).toBe(true);
    }
    expect(await countTokens(a.tenantId)).toBe(before);
  });
});
