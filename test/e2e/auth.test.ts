import { randomUUID } from 'node:crypto';
import { exportSPKI, generateKeyPair, SignJWT, type JWTPayload } from 'jose';
import { AUDIENCE, TokenService } from '../../src/modules/auth/token.service';
import { SigningKeys } from '../../src/modules/auth/signing-keys';
import { startTestApp, type TestApp } from '../support/test-app';

const b64 = (v: unknown) => Buffer.from(JSON.stringify(v)).toString('base64url');
const claimsOf = (token: string) =>
  JSON.parse(Buffer.from(token.split('.')[1], 'base64url').toString()) as JWTPayload & { tid: string; scope: string };
const headerOf = (token: string) =>
  JSON.parse(Buffer.from(token.split('.')[0], 'base64url').toString()) as { kid: string; alg: string };

describe('authentication (401)', () => {
  let app: TestApp;
  let keys: SigningKeys;
  let kid: string;
  /** Claims of a valid admin token of the default tenant, with a jti the instance recorded. */
  let claims: JWTPayload & { tid: string; scope: string };
  const tokens = (token: string) => app.request('GET', '/api/v1/tokens', { as: { token, tenantId: app.tenantId } });
  const expect401 = async (token: string, code = 'INVALID_TOKEN') => {
    const r = await tokens(token);
    expect({ status: r.status, code: r.body?.error?.code }).toEqual({ status: 401, code });
    expect(r.body.error.traceId).toMatch(/^[0-9a-f]{32}$/);
  };
  /** Signs `payload` with the instance's own active key (valid signature). */
  const signOwn = (payload: JWTPayload, header: Record<string, unknown> = {}) =>
    new SignJWT(payload).setProtectedHeader({ alg: 'EdDSA', kid, typ: 'JWT', ...header }).sign(keys.active.privateKey);

  beforeAll(async () => {
    app = await startTestApp();
    keys = app.ordo.app.get(SigningKeys);
    kid = keys.active.kid;
    claims = claimsOf(app.adminToken);
  });
  afterAll(async () => app.close());

  it('accepts the instance admin token (control case)', async () => {
    expect((await tokens(app.adminToken)).status).toBe(200);
    expect(await signOwn(claims)).toBeDefined();
    expect((await tokens(await signOwn(claims))).status).toBe(200);
  });

  it('returns 401 UNAUTHENTICATED with the envelope when no token is sent', async () => {
    const r = await app.request('GET', '/api/v1/tokens', { headers: { 'x-tenant-id': app.tenantId } });
    expect(r.status).toBe(401);
    expect(r.body.error.code).toBe('UNAUTHENTICATED');
    expect(r.body.error.traceId).toMatch(/^[0-9a-f]{32}$/);
  });

  it('returns 401 for a malformed Authorization header or token', async () => {
    for (const h of [
      'Basic dXNlcjpwYXNz',
      'Bearer',
      'Bearer not-a-jwt',
      `Token ${app.adminToken}`,
      'Bearer a.b.c',
      'Bearer ...',
    ]) {
      const r = await app.request('GET', '/api/v1/tokens', {
        headers: { authorization: h, 'x-tenant-id': app.tenantId },
      });
      expect({ h, status: r.status }).toEqual({ h, status: 401 });
      expect(r.body.error.code).toBe('INVALID_TOKEN');
    }
  });

  it('accepts the bearer scheme in any case', async () => {
    const r = await app.request('GET', '/api/v1/tokens', {
      headers: { authorization: `bearer ${app.adminToken}`, 'x-tenant-id': app.tenantId },
    });
    expect(r.status).toBe(200);
  });

  it('returns 401 for a token whose signature was altered', async () => {
    const [h, p, s] = app.adminToken.split('.');
    const flipped = s.slice(0, 10) + (s[10] === 'A' ? 'B' : 'A') + s.slice(11);
    await expect401(`${h}.${p}.${flipped}`);
    // A payload changed under the original signature (tenant escalation attempt).
    await expect401(`${h}.${b64({ ...claims, scope: 'orchestrator:admin', tid: 'other' })}.${s}`);
  });

  it('returns 401 for a truncated token', async () => {
    await expect401(app.adminToken.slice(0, -5));
    await expect401(app.adminToken.split('.').slice(0, 2).join('.') + '.');
  });

  it('returns 401 TOKEN_EXPIRED for an expired token', async () => {
    const minted = await app.ordo.app.get(TokenService).mintTenant(app.tenantId, 'old', ['orchestrator:admin'], -3600);
    await expect401(minted.token, 'TOKEN_EXPIRED');
  });

  it('returns 401 at once for a token revoked through the API', async () => {
    const r = await app.request('POST', '/api/v1/tokens', {
      as: { token: app.adminToken, tenantId: app.tenantId },
      body: { scopes: ['orchestrator:admin'] },
    });
    expect(r.status).toBe(201);
    const as = { token: r.body.token as string, tenantId: app.tenantId };
    expect((await tokens(as.token)).status).toBe(200);
    const rv = await app.request('POST', `/api/v1/tokens/${r.body.jti}/revoke`, {
      as: { token: app.adminToken, tenantId: app.tenantId },
    });
    expect(rv.status).toBe(200);
    // The very next request with the revoked token is refused.
    await expect401(as.token, 'TOKEN_REVOKED');
  });

  it('returns 401 for a correctly signed token this instance never minted (unknown jti)', async () => {
    await expect401(await signOwn({ ...claims, jti: randomUUID() }));
  });

  it('returns 401 for a wrong issuer or audience', async () => {
    await expect401(await signOwn({ ...claims, iss: 'someone-else' }));
    await expect401(await signOwn({ ...claims, aud: 'other-api' }));
    expect(claims.aud).toBe(AUDIENCE);
  });

  it('returns 401 for an unsigned alg "none" token', async () => {
    for (const alg of ['none', 'None', 'NONE']) {
      await expect401(`${b64({ alg, typ: 'JWT' })}.${b64(claims)}.`);
      await expect401(`${b64({ alg, kid, typ: 'JWT' })}.${b64(claims)}.`);
    }
  });

  it('returns 401 for HS256 tokens signed with the public key as the HMAC secret (algorithm confusion)', async () => {
    const jwk = keys.active.publicJwk;
    const secrets = [
      Buffer.from(jwk.x!, 'base64url'),
      Buffer.from(jwk.x!),
      Buffer.from(JSON.stringify(jwk)),
      Buffer.from(await exportSPKI(keys.active.publicKey)),
    ];
    for (const secret of secrets) {
      for (const alg of ['HS256', 'HS512']) {
        const t = await new SignJWT(claims).setProtectedHeader({ alg, kid, typ: 'JWT' }).sign(new Uint8Array(secret));
        await expect401(t);
      }
    }
  });

  it('returns 401 for RS256 and ES256 tokens, even naming the instance kid', async () => {
    for (const alg of ['RS256', 'ES256', 'PS256']) {
      const { privateKey } = await generateKeyPair(alg);
      await expect401(await new SignJWT(claims).setProtectedHeader({ alg, kid, typ: 'JWT' }).sign(privateKey));
    }
  });

  it('returns 401 for an EdDSA token signed by a foreign key, with an unknown or an instance kid', async () => {
    const { privateKey } = await generateKeyPair('EdDSA', { crv: 'Ed25519' });
    await expect401(await new SignJWT(claims).setProtectedHeader({ alg: 'EdDSA', kid, typ: 'JWT' }).sign(privateKey));
    await expect401(
      await new SignJWT(claims).setProtectedHeader({ alg: 'EdDSA', kid: 'A'.repeat(43), typ: 'JWT' }).sign(privateKey),
    );
    await expect401(await signOwn(claims, { kid: 'B'.repeat(43) }));
    await expect401(await signOwn(claims, { kid: undefined }));
  });

  it('returns 401 for kid injection (path traversal, SQL) and embedded-key headers', async () => {
    for (const bad of [
      '../../../../etc/passwd',
      "' or 1=1 --",
      `${kid}/../${kid}`,
      `${kid}'; drop table tenant; --`,
      '',
    ]) {
      await expect401(await signOwn(claims, { kid: bad }));
    }
    await expect401(await signOwn(claims, { jwk: keys.active.publicJwk }));
    await expect401(await signOwn(claims, { jku: 'http://127.0.0.1:1/jwks.json' }));
    // The tenant table is intact.
    expect((await tokens(app.adminToken)).status).toBe(200);
  });

  it('keeps verifying tokens signed by an older key after a rotation, and signs new ones with the new key', async () => {
    const oldKid = keys.active.kid;
    const newKid = await keys.rotate();
    expect(newKid).not.toBe(oldKid);
    expect((await tokens(app.adminToken)).status).toBe(200);
    const r = await app.request('POST', '/api/v1/tokens', {
      as: { token: app.adminToken, tenantId: app.tenantId },
      body: { scopes: ['orchestrator:admin'] },
    });
    expect(r.status).toBe(201);
    expect(headerOf(r.body.token as string).kid).toBe(newKid);
    expect((await tokens(r.body.token as string)).status).toBe(200);
  });
});

describe('authorisation (403) and tenant scoping', () => {
  let app: TestApp;
  beforeAll(async () => {
    app = await startTestApp();
  });
  afterAll(async () => app.close());

  it('returns 403 TENANT_MISMATCH when the token belongs to another tenant than X-Tenant-Id', async () => {
    const b = await app.tenant('tenant-b');
    const r = await app.request('GET', '/api/v1/tokens', { as: { token: b.token, tenantId: app.tenantId } });
    expect(r.status).toBe(403);
    expect(r.body.error.code).toBe('TENANT_MISMATCH');
  });

  it('returns 400 MISSING_TENANT without X-Tenant-Id and 400 INVALID_TENANT for a malformed one', async () => {
    const missing = await app.request('GET', '/api/v1/tokens', { as: { token: app.adminToken } });
    expect(missing.status).toBe(400);
    expect(missing.body.error.code).toBe('MISSING_TENANT');
    const bad = await app.request('GET', '/api/v1/tokens', { as: { token: app.adminToken, tenantId: 'Not A Tenant' } });
    expect(bad.status).toBe(400);
    expect(bad.body.error.code).toBe('INVALID_TENANT');
  });

  it('returns 403 INSUFFICIENT_SCOPE for a read or write token on an admin route', async () => {
    for (const scope of ['orchestrator:read', 'orchestrator:write'] as const) {
      const token = await app.token(app.tenantId, [scope]);
      const list = await app.request('GET', '/api/v1/tokens', { as: { token, tenantId: app.tenantId } });
      expect(list.status).toBe(403);
      expect(list.body.error.code).toBe('INSUFFICIENT_SCOPE');
      // Nor can it mint itself a stronger token.
      const mint = await app.request('POST', '/api/v1/tokens', {
        as: { token, tenantId: app.tenantId },
        body: { scopes: ['orchestrator:admin'] },
      });
      expect(mint.status).toBe(403);
      expect(mint.body.error.code).toBe('INSUFFICIENT_SCOPE');
    }
  });

  it('lets an admin mint tokens with scopes it holds (admin implies write and read)', async () => {
    const r = await app.request('POST', '/api/v1/tokens', {
      as: { token: app.adminToken, tenantId: app.tenantId },
      body: {
        scopes: ['orchestrator:read', 'orchestrator:write', 'orchestrator:write'],
        subject: 'svc',
        ttlSeconds: 600,
      },
    });
    expect(r.status).toBe(201);
    expect(r.body).toMatchObject({
      tenantId: app.tenantId,
      subject: 'svc',
      scopes: ['orchestrator:read', 'orchestrator:write'],
    });
    const c = claimsOf(r.body.token as string);
    expect(c).toMatchObject({
      tid: app.tenantId,
      sub: 'svc',
      scope: 'orchestrator:read orchestrator:write',
      jti: r.body.jti,
    });
    expect(c.exp! - c.iat!).toBe(600);
  });

  it('returns 403 TENANT_DISABLED for a disabled tenant, and accepts it again once enabled', async () => {
    const t = await app.tenant('tenant-off');
    const as = { token: t.token, tenantId: t.tenantId };
    const op = { token: app.platformToken };
    expect((await app.request('POST', '/api/v1/tenants/tenant-off/disable', { as: op })).status).toBe(200);
    const r = await app.request('GET', '/api/v1/tokens', { as });
    expect(r.status).toBe(403);
    expect(r.body.error.code).toBe('TENANT_DISABLED');
    expect((await app.request('POST', '/api/v1/tenants/tenant-off/enable', { as: op })).status).toBe(200);
    expect((await app.request('GET', '/api/v1/tokens', { as })).status).toBe(200);
  });

  it('returns 403 for a tenant token on platform routes and for a platform token on tenant routes', async () => {
    const tenantOnPlatform = await app.request('GET', '/api/v1/tenants', {
      as: { token: app.adminToken, tenantId: app.tenantId },
    });
    expect(tenantOnPlatform.status).toBe(403);
    expect(tenantOnPlatform.body.error.code).toBe('INSUFFICIENT_SCOPE');
    const platformOnTenant = await app.request('GET', '/api/v1/tokens', {
      as: { token: app.platformToken, tenantId: app.tenantId },
    });
    expect(platformOnTenant.status).toBe(403);
    expect(platformOnTenant.body.error.code).toBe('INSUFFICIENT_SCOPE');
    expect((await app.request('GET', '/api/v1/tenants', { as: { token: app.platformToken } })).status).toBe(200);
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
