import { canonicalJson } from '../../src/core/json/canonical-json';
import {
  generateSigningKeyPair,
  signDetached,
  type Ed25519PrivateJwk,
  type Ed25519PublicJwk,
} from '../../src/modules/trust/detached-jws';
import { TrustService } from '../../src/modules/trust/trust.service';
import { startTestApp, type TestApp } from '../support/test-app';

describe('trust store', () => {
  let app: TestApp;
  let a: { token: string; tenantId: string };
  let b: { token: string; tenantId: string };
  let pub: Ed25519PublicJwk;
  let priv: Ed25519PrivateJwk;

  const add = (body: unknown, as = a) => app.request('POST', '/api/v1/trust/keys', { as, body });

  beforeAll(async () => {
    app = await startTestApp();
    a = { token: app.adminToken, tenantId: app.tenantId };
    b = await app.tenant('trust-b');
    ({ publicJwk: pub, privateJwk: priv } = await generateSigningKeyPair('ci-1'));
  });
  afterAll(async () => app?.close());

  it('adds, gets and lists a public key', async () => {
    const r = await add({ kid: 'ci-1', owner: 'ci', publicJwk: pub, expiresAt: '2099-01-01T00:00:00Z' });
    expect(r.status).toBe(201);
    expect(r.body).toMatchObject({
      kid: 'ci-1',
      owner: 'ci',
      publicJwk: { kty: 'OKP', crv: 'Ed25519', x: pub.x },
      revokedAt: null,
      expiresAt: '2099-01-01T00:00:00.000Z',
    });
    expect((await app.request('GET', '/api/v1/trust/keys/ci-1', { as: a })).body.kid).toBe('ci-1');
    const list = await app.request('GET', '/api/v1/trust/keys', { as: a });
    expect(list.body.items.map((k: { kid: string }) => k.kid)).toContain('ci-1');
  });

  it('refuses a JWK with a private part (400 TRUST_KEY_PRIVATE) and stores nothing', async () => {
    const r = await add({ kid: 'leaky', owner: 'ci', publicJwk: priv });
    expect(r.status).toBe(400);
    expect(r.body.error.code).toBe('TRUST_KEY_PRIVATE');
    expect((await app.request('GET', '/api/v1/trust/keys/leaky', { as: a })).status).toBe(404);
  });

  it('refuses a key that is not Ed25519 (400 TRUST_KEY_INVALID)', async () => {
    const r = await add({ kid: 'rsa', owner: 'ci', publicJwk: { kty: 'RSA', n: 'abc', e: 'AQAB' } });
    expect(r.status).toBe(400);
    expect(r.body.error.code).toBe('TRUST_KEY_INVALID');
  });

  it('refuses a second key under the same kid (409 TRUST_KEY_EXISTS)', async () => {
    const other = await generateSigningKeyPair('dup');
    expect((await add({ kid: 'dup', owner: 'ci', publicJwk: other.publicJwk })).status).toBe(201);
    const r = await add({ kid: 'dup', owner: 'ci', publicJwk: { ...pub, kid: 'dup' } });
    expect(r.status).toBe(409);
    expect(r.body.error.code).toBe('TRUST_KEY_EXISTS');
  });

  it('revokes a key idempotently, keeping the first revocation time', async () => {
    const k = await generateSigningKeyPair('rev');
    await add({ kid: 'rev', owner: 'ci', publicJwk: k.publicJwk });
    const first = await app.request('POST', '/api/v1/trust/keys/rev/revoke', { as: a });
    expect(first.status).toBe(200);
    expect(first.body.revokedAt).toEqual(expect.any(String));
    const again = await app.request('POST', '/api/v1/trust/keys/rev/revoke', { as: a });
    expect(again.body.revokedAt).toBe(first.body.revokedAt);
  });

  it('lets a read token list keys but not add them (403)', async () => {
    const reader = { token: await app.token(a.tenantId, ['orchestrator:read']), tenantId: a.tenantId };
    expect((await app.request('GET', '/api/v1/trust/keys', { as: reader })).status).toBe(200);
    const k = await generateSigningKeyPair('by-reader');
    expect((await add({ kid: 'by-reader', owner: 'ci', publicJwk: k.publicJwk }, reader)).status).toBe(403);
  });

  it("tenant B cannot see or revoke tenant A's key (404)", async () => {
    expect((await app.request('GET', '/api/v1/trust/keys/ci-1', { as: b })).status).toBe(404);
    const revoke = await app.request('POST', '/api/v1/trust/keys/ci-1/revoke', { as: b });
    expect(revoke.status).toBe(404);
    expect((await app.request('GET', '/api/v1/trust/keys', { as: b })).body.items).toEqual([]);
    expect((await app.request('GET', '/api/v1/trust/keys/ci-1', { as: a })).body.revokedAt).toBeNull();
  });

  describe('requireSignedDags', () => {
    const dag = (id: string) => ({ id, steps: [{ id: 's', plugin: 'noop' }] });
    const publish = (body: unknown, sig?: string, as = a) =>
      app.request('POST', '/api/v1/dags', { as, body, headers: sig ? { 'x-ordo-dag-signature': sig } : {} });
    const sign = (body: unknown, key = priv) => signDetached(Buffer.from(canonicalJson(body)), key);

    it('is off by default and set with PUT /api/v1/policy by an admin only', async () => {
      expect((await app.request('GET', '/api/v1/policy', { as: a })).body).toEqual({ requireSignedDags: false });
      const reader = { token: await app.token(a.tenantId, ['orchestrator:read']), tenantId: a.tenantId };
      expect(
        (await app.request('PUT', '/api/v1/policy', { as: reader, body: { requireSignedDags: true } })).status,
      ).toBe(403);
      const r = await app.request('PUT', '/api/v1/policy', { as: a, body: { requireSignedDags: true } });
      expect(r.status).toBe(200);
      expect(r.body).toEqual({ requireSignedDags: true });
      expect((await app.request('GET', '/api/v1/policy', { as: b })).body).toEqual({ requireSignedDags: false });
    });

    it('refuses an unsigned publish with 403 DAG_SIGNATURE_REQUIRED and stores nothing', async () => {
      const r = await publish(dag('unsigned'));
      expect(r.status).toBe(403);
      expect(r.body.error.code).toBe('DAG_SIGNATURE_REQUIRED');
      expect((await app.request('GET', '/api/v1/dags/unsigned', { as: a })).status).toBe(404);
    });

    it('accepts a publish signed over the canonical JSON by a trusted key and records the signer', async () => {
      const body = dag('signed');
      const r = await publish(body, await sign(body));
      expect(r.status).toBe(201);
      const got = await app.request('GET', '/api/v1/dags/signed', { as: a });
      expect(got.body.signature).toEqual({ kid: 'ci-1', signer: 'ci', alg: 'EdDSA', source: 'api' });
    });

    it('refuses a signature over other content (422 DAG_SIGNATURE_INVALID)', async () => {
      const r = await publish(dag('tampered'), await sign(dag('original')));
      expect(r.status).toBe(422);
      expect(r.body.error.code).toBe('DAG_SIGNATURE_INVALID');
    });

    it('answers 4xx, never 500, for a signed body nested too deep to canonicalize', async () => {
      const depth = 200_000;
      const r = await app.request('POST', '/api/v1/dags', {
        as: a,
        rawBody: `{"id":"deep","steps":[],"x":${'['.repeat(depth)}${']'.repeat(depth)}}`,
        headers: { 'content-type': 'application/json', 'x-ordo-dag-signature': await sign({}) },
      });
      expect([400, 422]).toContain(r.status);
      let deep: unknown = [];
      for (let i = 0; i < depth; i++) deep = [deep];
      await expect(
        app.ordo.app.get(TrustService, { strict: false }).verifyDetachedJson(a.tenantId, deep, await sign({})),
      ).rejects.toMatchObject({
        code: 'DAG_SIGNATURE_INVALID',
        status: 422,
      });
    });

    it('refuses a signature by a revoked key (422 DAG_KEY_REVOKED)', async () => {
      const k = await generateSigningKeyPair('rev-dag');
      await add({ kid: 'rev-dag', owner: 'ci', publicJwk: k.publicJwk });
      await app.request('POST', '/api/v1/trust/keys/rev-dag/revoke', { as: a });
      const body = dag('by-revoked');
      const r = await publish(body, await sign(body, k.privateJwk));
      expect(r.status).toBe(422);
      expect(r.body.error.code).toBe('DAG_KEY_REVOKED');
    });

    it('refuses in tenant B a signature by a key only tenant A trusts (422 DAG_KEY_UNTRUSTED)', async () => {
      const body = dag('cross');
      const r = await publish(body, await sign(body), b);
      expect(r.status).toBe(422);
      expect(r.body.error.code).toBe('DAG_KEY_UNTRUSTED');
    });

    it('lets tenant B, without the policy, publish unsigned', async () => {
      expect((await publish(dag('b-unsigned'), undefined, b)).status).toBe(201);
    });
  });
});
