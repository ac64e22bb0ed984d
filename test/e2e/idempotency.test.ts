import { randomUUID } from 'node:crypto';
import { IdempotencyRepository } from '../../src/modules/idempotency/idempotency.repository';
import { requestHash } from '../../src/modules/idempotency/idempotency.interceptor';
import { startTestApp, type TestApp } from '../support/test-app';

describe('Idempotency-Key', () => {
  let app: TestApp;
  let a: { tenantId: string; token: string };
  let b: { tenantId: string; token: string };

  beforeAll(async () => {
    app = await startTestApp();
    a = await app.tenant('idem-a');
    b = await app.tenant('idem-b');
  });
  afterAll(async () => app.close());

  const mint = async (t: { tenantId: string; token: string }) => {
    const r = await app.request('POST', '/api/v1/tokens', { as: t, body: { scopes: ['orchestrator:read'] } });
    expect(r.status).toBe(201);
    return r.body.jti as string;
  };
  const revoke = (t: { tenantId: string; token: string }, jti: string, key?: string) =>
    app.request('POST', `/api/v1/tokens/${jti}/revoke`, { as: t, headers: key ? { 'idempotency-key': key } : {} });
  const records = async (tenantId: string) =>
    app.testDb.db.withTenant(tenantId, (tx) =>
      tx.selectFrom('idempotency_key').select(['key', 'state', 'response_status']).execute(),
    );

  it('replays the stored response with the same status and marks it replayed', async () => {
    const jti = await mint(a);
    const key = `k-${randomUUID()}`;
    const first = await revoke(a, jti, key);
    expect(first.status).toBe(200);
    expect(first.headers.get('idempotent-replayed')).toBeNull();
    const again = await revoke(a, jti, key);
    expect(again.status).toBe(200);
    expect(again.body).toEqual(first.body);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect((await records(a.tenantId)).find((r) => r.key === key)).toMatchObject({
      state: 'done',
      response_status: 200,
    });
  });

  it('replays a stored 4xx answer with its status and envelope', async () => {
    const missing = randomUUID();
    const key = `k-${randomUUID()}`;
    const first = await revoke(a, missing, key);
    expect(first.status).toBe(404);
    expect(first.body.error.code).toBe('NOT_FOUND');
    const again = await revoke(a, missing, key);
    expect(again.status).toBe(404);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(again.body).toEqual(first.body);
  });

  it('answers 422 IDEMPOTENCY_KEY_REUSED for the same key with another request, and changes nothing', async () => {
    const [j1, j2] = [await mint(a), await mint(a)];
    const key = `k-${randomUUID()}`;
    expect((await revoke(a, j1, key)).status).toBe(200);
    const other = await revoke(a, j2, key);
    expect(other.status).toBe(422);
    expect(other.body.error.code).toBe('IDEMPOTENCY_KEY_REUSED');
    const list = await app.request('GET', '/api/v1/tokens?limit=500', { as: a });
    expect(
      (list.body.items as { jti: string; revokedAt: string | null }[]).find((t) => t.jti === j2)?.revokedAt,
    ).toBeNull();
  });

  it('answers 409 IDEMPOTENCY_IN_PROGRESS for a duplicate while the first request is still processing', async () => {
    const jti = await mint(a);
    const key = `k-${randomUUID()}`;
    const path = `/api/v1/tokens/${jti}/revoke`;
    // The first request holds the key (state processing), exactly as the interceptor claims it.
    const repo = app.ordo.app.get(IdempotencyRepository, { strict: false });
    await app.testDb.db.withTenant(a.tenantId, (tx) =>
      repo.claim(tx, { key, method: 'POST', path, hash: requestHash('POST', path, undefined), ttlSeconds: 3600 }),
    );
    const dup = await revoke(a, jti, key);
    expect(dup.status).toBe(409);
    expect(dup.body.error.code).toBe('IDEMPOTENCY_IN_PROGRESS');
    const list = await app.request('GET', '/api/v1/tokens?limit=500', { as: a });
    expect(
      (list.body.items as { jti: string; revokedAt: string | null }[]).find((t) => t.jti === jti)?.revokedAt,
    ).toBeNull();
  });

  it('answers two simultaneous requests with one key once: the other is a 409 or a replay', async () => {
    const jti = await mint(a);
    const key = `k-${randomUUID()}`;
    const [r1, r2] = await Promise.all([revoke(a, jti, key), revoke(a, jti, key)]);
    const statuses = [r1.status, r2.status].sort();
    expect([
      [200, 200],
      [200, 409],
    ]).toContainEqual(statuses);
    const replayed = [r1, r2].filter((r) => r.headers.get('idempotent-replayed') === 'true').length;
    expect(replayed + statuses.filter((s) => s === 409).length).toBe(1);
  });

  it("scopes keys by tenant: tenant B using tenant A's key gets its own result", async () => {
    const key = `shared-${randomUUID()}`;
    const ja = await mint(a);
    const jb = await mint(b);
    const ra = await revoke(a, ja, key);
    const rb = await revoke(b, jb, key);
    expect(ra.status).toBe(200);
    expect(rb.status).toBe(200);
    expect(rb.body.jti).toBe(jb);
    expect(rb.headers.get('idempotent-replayed')).toBeNull();
    // B replaying A's request through the same key reaches B's own record only: A's jti is not found for B.
    const cross = await revoke(b, ja, `k-${randomUUID()}`);
    expect(cross.status).toBe(404);
    expect((await records(a.tenantId)).filter((r) => r.key === key)).toHaveLength(1);
    expect((await records(b.tenantId)).filter((r) => r.key === key)).toHaveLength(1);
  });

  it('treats an expired key as unused: a new request with it runs', async () => {
    const [j1, j2] = [await mint(a), await mint(a)];
    const key = `k-${randomUUID()}`;
    const path = `/api/v1/tokens/${j1}/revoke`;
    const repo = app.ordo.app.get(IdempotencyRepository, { strict: false });
    // A finished record for another request whose lifetime is over (not yet purged).
    await app.testDb.db.withTenant(a.tenantId, async (tx) => {
      await repo.claim(tx, { key, method: 'POST', path, hash: requestHash('POST', path, undefined), ttlSeconds: -1 });
      await repo.complete(tx, key, 200, { jti: j1 });
    });
    const r = await revoke(a, j2, key);
    expect(r.status).toBe(200);
    expect(r.body.jti).toBe(j2);
    expect(r.headers.get('idempotent-replayed')).toBeNull();
    expect((await revoke(a, j2, key)).headers.get('idempotent-replayed')).toBe('true');
  });

  it('does not store requests rejected by validation, and rejects malformed keys with 400', async () => {
    const key = `k-${randomUUID()}`;
    const bad = await revoke(a, 'not-a-uuid', key);
    expect(bad.status).toBe(400);
    expect((await records(a.tenantId)).find((r) => r.key === key)).toBeUndefined();
    const jti = await mint(a);
    expect((await revoke(a, jti, key)).status).toBe(200);
    const long = await revoke(a, jti, 'x'.repeat(256));
    expect(long.status).toBe(400);
    expect(long.body.error.code).toBe('INVALID_IDEMPOTENCY_KEY');
  });

  it('ignores the key on token minting, whose response holds a secret that is never stored', async () => {
    const key = `k-${randomUUID()}`;
    const body = { scopes: ['orchestrator:read'] };
    const r1 = await app.request('POST', '/api/v1/tokens', { as: a, body, headers: { 'idempotency-key': key } });
    const r2 = await app.request('POST', '/api/v1/tokens', { as: a, body, headers: { 'idempotency-key': key } });
    expect([r1.status, r2.status]).toEqual([201, 201]);
    expect(r1.body.jti).not.toBe(r2.body.jti);
    expect((await records(a.tenantId)).find((r) => r.key === key)).toBeUndefined();
  });
});
