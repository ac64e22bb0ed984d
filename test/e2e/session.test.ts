import { createHash } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import pg from 'pg';
import pino from 'pino';
import WebSocket from 'ws';
import { TokenService } from '../../src/modules/auth/token.service';
import { startOrdo, type RunningOrdo } from '../../src/ordo';
import { startTestApp, type TestApp } from '../support/test-app';
import { publishDag } from './runs-support';

let runs = 0;
const newRun = () => ({ dagId: 'one', runToken: `session-${++runs}` });

interface Answer {
  status: number;
  headers: Headers;
  body: any;
}

/**
 * Console sessions through the real routes, on two api replicas sharing one database: sign-in,
 * the cookie's attributes, cookie authentication of API routes and of the stream, CSRF, sign-out,
 * revocation and expiry, tenant isolation, and the security headers.
 */
describe('console sessions', () => {
  let a: TestApp;
  let b: RunningOrdo;
  let owner: pg.Client;
  let runOfB: string;

  beforeAll(async () => {
    a = await startTestApp();
    b = await startOrdo(a.config, pino({ level: 'silent' }), {
      appUrl: a.testDb.appUrl,
      systemUrl: a.testDb.systemUrl,
      ownerUrl: a.testDb.ownerUrl,
    });
    owner = new pg.Client({ connectionString: a.testDb.ownerUrl });
    await owner.connect();
    await publishDag(a, a.tenantId, { id: 'one', steps: [{ id: 's', plugin: 'noop' }] });
    const other = await a.tenant('session-b');
    await publishDag(a, other.tenantId, { id: 'one', steps: [{ id: 's', plugin: 'noop' }] });
    const r = await a.request('POST', '/api/v1/runs', { as: other, body: newRun() });
    expect(r.status).toBe(201);
    runOfB = r.body.runId as string;
  });
  afterAll(async () => {
    await owner?.end();
    await b?.close();
    await a?.close();
  });

  const call = async (
    base: string,
    method: string,
    url: string,
    opts: { cookie?: string; headers?: Record<string, string>; body?: unknown } = {},
  ): Promise<Answer> => {
    const headers: Record<string, string> = { ...(opts.headers ?? {}) };
    if (opts.cookie !== undefined) headers.cookie = `ordo_session=${opts.cookie}`;
    if (opts.body !== undefined) headers['content-type'] = 'application/json';
    const r = await fetch(`${base}${url}`, {
      method,
      headers,
      body: opts.body === undefined ? undefined : JSON.stringify(opts.body),
    });
    const text = await r.text();
    return { status: r.status, headers: r.headers, body: text ? JSON.parse(text) : undefined };
  };
  const onA = (method: string, url: string, opts?: Parameters<typeof call>[3]) => call(a.url, method, url, opts);
  const onB = (method: string, url: string, opts?: Parameters<typeof call>[3]) => call(b.url, method, url, opts);

  /** Signs in with a token; returns the session id from the cookie and the answer. */
  const signIn = async (token: string) => {
    const r = await onA('POST', '/api/v1/session', { body: { token } });
    expect(r.status).toBe(201);
    const setCookie = r.headers.get('set-cookie') ?? '';
    const m = /^ordo_session=([A-Za-z0-9_-]+);/.exec(setCookie);
    expect(m).not.toBeNull();
    return { id: m![1], setCookie, body: r.body as Record<string, unknown>, csrf: r.body.csrfToken as string };
  };
  const mint = async (scopes: string[], extra: Record<string, unknown> = {}) => {
    const r = await a.request('POST', '/api/v1/tokens', {
      as: { token: a.adminToken, tenantId: a.tenantId },
      body: { scopes, ...extra },
    });
    expect(r.status).toBe(201);
    return { token: r.body.token as string, jti: r.body.jti as string, expiresAt: r.body.expiresAt as string };
  };

  it('signs in with a tenant token: 201 with the session, and an HttpOnly, SameSite=Strict cookie for at most 12 h', async () => {
    const t = await mint(['orchestrator:write'], { ttlSeconds: 3600 });
    const s = await signIn(t.token);
    expect(s.body).toEqual({
      tenantId: a.tenantId,
      subject: expect.any(String),
      scopes: ['orchestrator:write'],
      expiresAt: expect.any(String),
      csrfToken: expect.stringMatching(/^[A-Za-z0-9_-]{43}$/),
    });
    expect(Date.parse(s.body.expiresAt as string)).toBeLessThanOrEqual(Date.parse(t.expiresAt));
    const attrs = s.setCookie.split(';').map((x) => x.trim().toLowerCase());
    expect(attrs).toEqual(expect.arrayContaining(['httponly', 'samesite=strict', 'path=/']));
    // Plain HTTP here: the cookie is Secure only over TLS.
    expect(attrs).not.toContain('secure');
    const maxAge = Number(attrs.find((x) => x.startsWith('max-age='))?.slice('max-age='.length));
    expect(maxAge).toBeGreaterThan(0);
    expect(maxAge).toBeLessThanOrEqual(3600);

    const long = await signIn(a.adminToken);
    const longAge = Number(/Max-Age=(\d+)/i.exec(long.setCookie)?.[1]);
    expect(longAge).toBeLessThanOrEqual(12 * 3600);
    expect(Date.parse(long.body.expiresAt as string)).toBeLessThanOrEqual(Date.now() + 12 * 3600 * 1000);
  });

  it('stores only a hash of the session id, and not the token', async () => {
    const t = await mint(['orchestrator:read']);
    const s = await signIn(t.token);
    const rows = await owner.query<{ id_hash: Buffer; token_jti: string; row: string }>(
      `select id_hash, token_jti, to_jsonb(s)::text as row from console_session s where token_jti = $1`,
      [t.jti],
    );
    expect(rows.rows).toHaveLength(1);
    expect(rows.rows[0].id_hash.equals(createHash('sha256').update(s.id).digest())).toBe(true);
    expect(rows.rows[0].row).not.toContain(s.id);
    expect(rows.rows[0].row).not.toContain(t.token.split('.')[2]);
  });

  it('authenticates API routes with the cookie alone, on either replica, and answers GET /api/v1/session', async () => {
    const s = await signIn((await mint(['orchestrator:read'])).token);
    for (const on of [onA, onB]) {
      const runs = await on('GET', '/api/v1/runs', { cookie: s.id });
      expect(runs.status).toBe(200);
      expect(Array.isArray(runs.body.items)).toBe(true);
      const me = await on('GET', '/api/v1/session', { cookie: s.id });
      expect(me.status).toBe(200);
      expect(me.body).toEqual(s.body);
    }
    // The scopes are the token's: a read token cannot write through its session.
    const w = await onA('POST', '/api/v1/runs', { cookie: s.id, headers: { 'x-csrf-token': s.csrf }, body: newRun() });
    expect(w.status).toBe(403);
    expect(w.body.error.code).toBe('INSUFFICIENT_SCOPE');
  });

  it('refuses a state-changing request with the cookie but without its X-CSRF-Token (403 CSRF_FAILED), and accepts it with it', async () => {
    const s = await signIn((await mint(['orchestrator:write'])).token);
    const other = await signIn((await mint(['orchestrator:write'])).token);
    const create = (headers: Record<string, string>) =>
      onA('POST', '/api/v1/runs', { cookie: s.id, headers, body: newRun() });
    for (const headers of [{}, { 'x-csrf-token': 'nope' }, { 'x-csrf-token': other.csrf }] as Record<
      string,
      string
    >[]) {
      const r = await create(headers);
      expect({ status: r.status, code: r.body.error?.code }).toEqual({ status: 403, code: 'CSRF_FAILED' });
    }
    const ok = await create({ 'x-csrf-token': s.csrf });
    expect(ok.status).toBe(201);
    expect(ok.body.status).toBe('queued');
    // A bearer request needs no CSRF token.
    const bearer = await a.request('POST', '/api/v1/runs', {
      as: { token: a.adminToken, tenantId: a.tenantId },
      body: newRun(),
    });
    expect(bearer.status).toBe(201);
  });

  it('lets the bearer token win over the cookie when both are present', async () => {
    const s = await signIn(a.adminToken);
    const r = await onA('GET', '/api/v1/runs', {
      cookie: s.id,
      headers: { authorization: 'Bearer not.a.token', 'x-tenant-id': a.tenantId },
    });
    expect(r.status).toBe(401);
    expect(r.body.error.code).toBe('INVALID_TOKEN');
  });

  it("never reads another tenant's data through a session: 404 on tenant B's run, 403 when naming tenant B", async () => {
    const s = await signIn(a.adminToken);
    const r = await onA('GET', `/api/v1/runs/${runOfB}`, { cookie: s.id });
    expect(r.status).toBe(404);
    expect(JSON.stringify(r.body)).not.toContain('session-b');
    const named = await onA('GET', `/api/v1/runs/${runOfB}`, { cookie: s.id, headers: { 'x-tenant-id': 'session-b' } });
    expect(named.status).toBe(403);
    expect(named.body.error.code).toBe('TENANT_MISMATCH');
    const list = await onA('GET', '/api/v1/runs?limit=500', { cookie: s.id });
    expect(list.body.items.map((x: { runId: string }) => x.runId)).not.toContain(runOfB);
  });

  it('ends the session on every replica when its token is revoked', async () => {
    const t = await mint(['orchestrator:read']);
    const s = await signIn(t.token);
    // Replica B has seen the token valid before the revocation.
    expect((await onB('GET', '/api/v1/runs', { cookie: s.id })).status).toBe(200);
    const rv = await a.request('POST', `/api/v1/tokens/${t.jti}/revoke`, {
      as: { token: a.adminToken, tenantId: a.tenantId },
    });
    expect(rv.status).toBe(200);
    for (const on of [onB, onA]) {
      const r = await on('GET', '/api/v1/runs', { cookie: s.id });
      expect({ status: r.status, code: r.body.error?.code }).toEqual({ status: 401, code: 'TOKEN_REVOKED' });
      expect((await on('GET', '/api/v1/session', { cookie: s.id })).status).toBe(401);
    }
    const again = await onA('POST', '/api/v1/session', { body: { token: t.token } });
    expect(again.status).toBe(401);
  });

  it('signs out: the CSRF token is required, then 204, the cookie is cleared and the session refused on every replica', async () => {
    const s = await signIn(a.adminToken);
    const noCsrf = await onA('DELETE', '/api/v1/session', { cookie: s.id });
    expect(noCsrf.status).toBe(403);
    expect(noCsrf.body.error.code).toBe('CSRF_FAILED');
    expect((await onB('GET', '/api/v1/runs', { cookie: s.id })).status).toBe(200);
    const out = await onA('DELETE', '/api/v1/session', { cookie: s.id, headers: { 'x-csrf-token': s.csrf } });
    expect(out.status).toBe(204);
    expect(out.headers.get('set-cookie')).toMatch(/^ordo_session=;.*(Max-Age=0|Expires=Thu, 01 Jan 1970)/i);
    for (const on of [onA, onB]) {
      const r = await on('GET', '/api/v1/runs', { cookie: s.id });
      expect({ status: r.status, code: r.body.error?.code }).toEqual({ status: 401, code: 'SESSION_INVALID' });
      expect((await on('GET', '/api/v1/session', { cookie: s.id })).status).toBe(401);
    }
    // Signing out without a session is not an error.
    expect((await onA('DELETE', '/api/v1/session', {})).status).toBe(204);
  });

  it('answers 401 to GET /api/v1/session without a cookie, and to a cookie that names no session', async () => {
    const none = await onA('GET', '/api/v1/session');
    expect({ status: none.status, code: none.body.error.code }).toEqual({ status: 401, code: 'UNAUTHENTICATED' });
    for (const id of ['x', 'A'.repeat(43)]) {
      const r = await onA('GET', '/api/v1/session', { cookie: id });
      expect({ status: r.status, code: r.body.error.code }).toEqual({ status: 401, code: 'SESSION_INVALID' });
      expect((await onA('GET', '/api/v1/runs', { cookie: id })).status).toBe(401);
    }
  });

  it('refuses to open a session for a worker token (403), an expired token (401) or a bad one (401)', async () => {
    const worker = await mint(['worker'], { pool: 'console-pool' });
    const w = await onA('POST', '/api/v1/session', { body: { token: worker.token } });
    expect({ status: w.status, code: w.body.error.code }).toEqual({ status: 403, code: 'INSUFFICIENT_SCOPE' });
    expect(w.headers.get('set-cookie')).toBeNull();
    const expired = await a.ordo.app.get(TokenService).mintTenant(a.tenantId, 'old', ['orchestrator:admin'], -3600);
    const e = await onA('POST', '/api/v1/session', { body: { token: expired.token } });
    expect({ status: e.status, code: e.body.error.code }).toEqual({ status: 401, code: 'TOKEN_EXPIRED' });
    const bad = await onA('POST', '/api/v1/session', { body: { token: 'not-a-token' } });
    expect(bad.status).toBe(401);
    expect(bad.body.error.traceId).toMatch(/^[0-9a-f]{32}$/);
    expect(bad.headers.get('set-cookie')).toBeNull();
    const foreign = await onA('POST', '/api/v1/session', {
      body: { token: a.adminToken },
      headers: { origin: 'https://evil.example' },
    });
    expect({ status: foreign.status, code: foreign.body.error.code }).toEqual({ status: 403, code: 'CSRF_FAILED' });
  });

  it('refuses a session past its expiry', async () => {
    const t = await mint(['orchestrator:read']);
    const s = await signIn(t.token);
    expect((await onA('GET', '/api/v1/runs', { cookie: s.id })).status).toBe(200);
    await owner.query(
      `update console_session set created_at = now() - interval '2 hours', expires_at = now() - interval '1 second'
        where token_jti = $1`,
      [t.jti],
    );
    const r = await onA('GET', '/api/v1/runs', { cookie: s.id });
    expect({ status: r.status, code: r.body.error.code }).toEqual({ status: 401, code: 'SESSION_INVALID' });
  });

  it("opens a platform operator's session for the platform routes only", async () => {
    const s = await signIn(a.platformToken);
    expect(s.body).toMatchObject({ tenantId: null, scopes: ['platform:admin'] });
    expect((await onA('GET', '/api/v1/tenants', { cookie: s.id })).status).toBe(200);
    const tenantRoute = await onA('GET', '/api/v1/runs', { cookie: s.id, headers: { 'x-tenant-id': a.tenantId } });
    expect(tenantRoute.status).toBe(403);
  });

  it('accepts the cookie on the stream from this origin only', async () => {
    const s = await signIn(a.adminToken);
    const url = `${a.url.replace('http', 'ws')}/api/v1/stream`;
    const first = await new Promise<{ type: string; tenant?: string }>((resolve, reject) => {
      const ws = new WebSocket(url, { headers: { cookie: `ordo_session=${s.id}`, origin: a.url } });
      ws.once('message', (d: Buffer) => {
        ws.terminate();
        resolve(JSON.parse(d.toString('utf8')) as { type: string; tenant?: string });
      });
      ws.once('error', reject);
    });
    expect(first).toMatchObject({ type: 'ready', tenant: a.tenantId });
    for (const origin of ['https://evil.example', undefined]) {
      const refused = await new Promise<number>((resolve, reject) => {
        const ws = new WebSocket(url, {
          headers: { cookie: `ordo_session=${s.id}`, ...(origin ? { origin } : {}) },
        });
        ws.once('open', () => {
          ws.terminate();
          reject(new Error('the upgrade was accepted'));
        });
        ws.once('unexpected-response', (_req, res: IncomingMessage) => resolve(res.statusCode ?? 0));
        ws.once('error', reject);
      });
      expect(refused).toBe(403);
    }
  });

  it('sends the Content-Security-Policy and the security headers on the console paths', async () => {
    for (const path of ['/', '/runs']) {
      const r = await fetch(`${a.url}${path}`);
      await r.arrayBuffer();
      expect(r.headers.get('content-security-policy')).toBe(
        "default-src 'self';script-src 'self';style-src 'self';img-src 'self' data:;connect-src 'self';" +
          "frame-ancestors 'none';base-uri 'none';form-action 'self';object-src 'none'",
      );
      expect(r.headers.get('x-content-type-options')).toBe('nosniff');
      expect(r.headers.get('referrer-policy')).toBe('no-referrer');
      expect(r.headers.get('x-frame-options')).toBe('DENY');
    }
  });
});
