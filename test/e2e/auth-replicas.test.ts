import pino from 'pino';
import { startOrdo, type RunningOrdo } from '../../src/ordo';
import { cutListeners } from '../support/listeners';
import { startTestApp, type TestApp } from '../support/test-app';

/**
 * Two api replicas on one database. Each keeps the revocation state of the tokens it has seen
 * (no query per request); a revocation or a tenant's status change through one replica holds on
 * the other at once, also after the other lost its listening connection.
 */
describe('token revocation across api replicas', () => {
  let a: TestApp;
  let b: RunningOrdo;

  beforeAll(async () => {
    a = await startTestApp();
    b = await startOrdo(a.config, pino({ level: 'silent' }), {
      appUrl: a.testDb.appUrl,
      systemUrl: a.testDb.systemUrl,
      ownerUrl: a.testDb.ownerUrl,
    });
  });
  afterAll(async () => {
    await b?.close();
    await a?.close();
  });

  const onB = async (token: string, tenantId: string) => {
    const r = await fetch(`${b.url}/api/v1/tokens`, {
      headers: { authorization: `Bearer ${token}`, 'x-tenant-id': tenantId },
    });
    return { status: r.status, body: (await r.json()) as { error?: { code: string } } };
  };
  const admin = () => ({ token: a.adminToken, tenantId: a.tenantId });
  const mint = async () => {
    const r = await a.request('POST', '/api/v1/tokens', { as: admin(), body: { scopes: ['orchestrator:admin'] } });
    expect(r.status).toBe(201);
    return { token: r.body.token as string, jti: r.body.jti as string };
  };

  it('refuses on replica B, at once, a token revoked through replica A', async () => {
    for (let round = 0; round < 5; round++) {
      const t = await mint();
      // B has seen the token valid (and keeps that) before the revocation.
      expect((await onB(t.token, a.tenantId)).status).toBe(200);
      expect((await onB(t.token, a.tenantId)).status).toBe(200);
      const rv = await a.request('POST', `/api/v1/tokens/${t.jti}/revoke`, { as: admin() });
      expect(rv.status).toBe(200);
      const r = await onB(t.token, a.tenantId);
      expect(r.status).toBe(401);
      expect(r.body.error?.code).toBe('TOKEN_REVOKED');
      expect((await a.request('GET', '/api/v1/tokens', { as: { token: t.token, tenantId: a.tenantId } })).status).toBe(
        401,
      );
    }
  });

  it('refuses on replica B, at once, the tokens of a tenant disabled through replica A, and accepts them once enabled', async () => {
    const t = await a.tenant('replica-off');
    expect((await onB(t.token, t.tenantId)).status).toBe(200);
    const op = { token: a.platformToken };
    expect((await a.request('POST', '/api/v1/tenants/replica-off/disable', { as: op })).status).toBe(200);
    const off = await onB(t.token, t.tenantId);
    expect(off.status).toBe(403);
    expect(off.body.error?.code).toBe('TENANT_DISABLED');
    expect((await a.request('POST', '/api/v1/tenants/replica-off/enable', { as: op })).status).toBe(200);
    expect((await onB(t.token, t.tenantId)).status).toBe(200);
  });

  it('does not trust what it knew before its listening connection was cut, as notifications may have been missed', async () => {
    const t = await mint();
    expect((await onB(t.token, a.tenantId)).status).toBe(200);
    // Revoked straight in the database while the replicas' listeners are cut; both listen again
    // (after a backoff) once they noticed the loss.
    const cut = await cutListeners(a.testDb.ownerUrl, 'ordo:auth-listen', (owner) =>
      owner.query(`update api_token set revoked_at = now(), revoked_by = 'test' where jti = $1`, [t.jti]),
    );
    expect(cut).toMatchObject({ before: 2, after: 2 });
    const r = await onB(t.token, a.tenantId);
    expect(r.status).toBe(401);
    expect(r.body.error?.code).toBe('TOKEN_REVOKED');
  });
});
