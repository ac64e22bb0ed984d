import fs from 'node:fs';
import path from 'node:path';
import pg from 'pg';
import { makeRedactor, redactJson } from '../../src/modules/secrets/redact';
import { SECRET_KEY_FILE } from '../../src/modules/secrets/secret-keys';
import { SecretNotFoundError, SecretsService } from '../../src/modules/secrets/secrets.service';
import { startTestApp, type TestApp } from '../support/test-app';

describe('tenant secrets API', () => {
  let app: TestApp;
  let a: { token: string; tenantId: string };
  let b: { token: string; tenantId: string };
  let service: SecretsService;
  const as = (t: { token: string; tenantId: string }) => ({ as: { token: t.token, tenantId: t.tenantId } });

  beforeAll(async () => {
    app = await startTestApp();
    a = { token: app.adminToken, tenantId: app.tenantId };
    b = await app.tenant('tenant-b');
    service = app.ordo.app.get(SecretsService, { strict: false });
  });
  afterAll(async () => app.close());

  it('creates, replaces and lists secrets by name without ever returning a value', async () => {
    const created = await app.request('PUT', '/api/v1/secrets/API_TOKEN', {
      ...as(a),
      body: { value: 'first-value-123' },
    });
    expect(created.status).toBe(200);
    expect(created.body).toMatchObject({ name: 'API_TOKEN', created: true });
    const replaced = await app.request('PUT', '/api/v1/secrets/API_TOKEN', {
      ...as(a),
      body: { value: 'second-value-456' },
    });
    expect(replaced.body).toMatchObject({ name: 'API_TOKEN', created: false });
    expect(Date.parse(replaced.body.updatedAt)).toBeGreaterThanOrEqual(Date.parse(created.body.updatedAt));
    expect(replaced.body.createdAt).toBe(created.body.createdAt);

    const list = await app.request('GET', '/api/v1/secrets', as(a));
    expect(list.status).toBe(200);
    expect(list.body.items.map((s: { name: string }) => s.name)).toContain('API_TOKEN');
    expect(list.text).not.toContain('value-');
    expect(await service.resolve(a.tenantId, ['API_TOKEN'])).toEqual({ API_TOKEN: 'second-value-456' });
  });

  it('stores only ciphertext in the database, under a key kept in a 0600 file outside it', async () => {
    await app.request('PUT', '/api/v1/secrets/DB_PASSWORD', { ...as(a), body: { value: 'plaintext-marker-789' } });
    const c = new pg.Client({ connectionString: app.testDb.ownerUrl });
    await c.connect();
    try {
      const r = await c.query<{ ciphertext: Buffer; key_id: string }>(
        'select * from secret where tenant_id = $1 and name = $2',
        [a.tenantId, 'DB_PASSWORD'],
      );
      expect(r.rows).toHaveLength(1);
      expect(JSON.stringify(r.rows[0])).not.toContain('plaintext-marker-789');
      expect(r.rows[0].ciphertext.toString('latin1')).not.toContain('plaintext-marker-789');
      expect(r.rows[0].key_id).toMatch(/^sk-[0-9a-f]{16}$/);
      // A ciphertext moved to another tenant does not decrypt there (tenant is the GCM additional data).
      await c.query(
        `insert into secret (tenant_id, name, key_id, nonce, ciphertext, created_by, updated_by)
         select $1, name, key_id, nonce, ciphertext, 'x', 'x' from secret where tenant_id = $2 and name = 'DB_PASSWORD'`,
        [b.tenantId, a.tenantId],
      );
      await expect(service.resolve(b.tenantId, ['DB_PASSWORD'])).rejects.toMatchObject({ code: 'SECRET_UNREADABLE' });
      await c.query(`delete from secret where tenant_id = $1`, [b.tenantId]);
    } finally {
      await c.end();
    }
    const keyFile = path.join(app.config.home, 'keys', SECRET_KEY_FILE);
    expect(fs.statSync(keyFile).mode & 0o777).toBe(0o600);
  });

  it('resolves several names at once and names every missing one with SECRET_NOT_FOUND', async () => {
    await app.request('PUT', '/api/v1/secrets/ONE', { ...as(a), body: { value: 'v-one' } });
    await app.request('PUT', '/api/v1/secrets/TWO', { ...as(a), body: { value: 'v-two' } });
    expect(await service.resolve(a.tenantId, ['ONE', 'TWO', 'ONE'])).toEqual({ ONE: 'v-one', TWO: 'v-two' });
    const err = await service.resolve(a.tenantId, ['ONE', 'NOPE', 'ALSO_NOPE']).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(SecretNotFoundError);
    expect(err).toMatchObject({ code: 'SECRET_NOT_FOUND', missing: ['ALSO_NOPE', 'NOPE'] });
    expect(await service.resolve(a.tenantId, [])).toEqual({});
  });

  it("tenant B cannot list, read, overwrite or delete tenant A's secrets", async () => {
    await app.request('PUT', '/api/v1/secrets/SHARED_NAME', { ...as(a), body: { value: 'a-owns-this' } });

    const listB = await app.request('GET', '/api/v1/secrets', as(b));
    expect(listB.status).toBe(200);
    expect(listB.body.items).toEqual([]);

    const delB = await app.request('DELETE', '/api/v1/secrets/SHARED_NAME', as(b));
    expect(delB.status).toBe(404);
    expect(delB.body.error.code).toBe('NOT_FOUND');

    await expect(service.resolve(b.tenantId, ['SHARED_NAME'])).rejects.toMatchObject({ code: 'SECRET_NOT_FOUND' });

    // B writing the same name creates B's own secret; A's value is untouched.
    const putB = await app.request('PUT', '/api/v1/secrets/SHARED_NAME', { ...as(b), body: { value: 'b-owns-this' } });
    expect(putB.body).toMatchObject({ created: true });
    expect(await service.resolve(a.tenantId, ['SHARED_NAME'])).toEqual({ SHARED_NAME: 'a-owns-this' });
    expect(await service.resolve(b.tenantId, ['SHARED_NAME'])).toEqual({ SHARED_NAME: 'b-owns-this' });
    expect(
      (await app.request('GET', '/api/v1/secrets', as(b))).body.items.map((s: { name: string }) => s.name),
    ).toEqual(['SHARED_NAME']);

    // A token of tenant A presented with tenant B's header is refused outright.
    const cross = await app.request('GET', '/api/v1/secrets', { as: { token: a.token, tenantId: b.tenantId } });
    expect(cross.status).toBe(403);
  });

  it('deletes a secret; deleting it again is 404', async () => {
    await app.request('PUT', '/api/v1/secrets/TEMP', { ...as(a), body: { value: 'short-lived' } });
    expect((await app.request('DELETE', '/api/v1/secrets/TEMP', as(a))).status).toBe(204);
    expect((await app.request('DELETE', '/api/v1/secrets/TEMP', as(a))).status).toBe(404);
    await expect(service.resolve(a.tenantId, ['TEMP'])).rejects.toMatchObject({ code: 'SECRET_NOT_FOUND' });
  });

  it('rejects bad names, bodies and oversize values with 4xx and stores nothing', async () => {
    const before = (await app.request('GET', '/api/v1/secrets', as(a))).body.items.length;
    for (const name of ['1STARTS_WITH_DIGIT', 'has.dot', 'has%20space', 'x'.repeat(101), 'semi;colon']) {
      const r = await app.request('PUT', `/api/v1/secrets/${name}`, { ...as(a), body: { value: 'v' } });
      expect({ name, status: r.status }).toEqual({ name, status: name.length > 100 ? 414 : 400 });
    }
    expect(
      (await app.request('PUT', `/api/v1/secrets/${'x'.repeat(100)}`, { ...as(a), body: { value: 'v' } })).status,
    ).toBe(200);
    expect((await app.request('DELETE', `/api/v1/secrets/${'x'.repeat(100)}`, as(a))).status).toBe(204);
    for (const body of [{}, { value: '' }, { value: 42 }, { value: 'v', extra: true }]) {
      const r = await app.request('PUT', '/api/v1/secrets/OK_NAME', { ...as(a), body });
      expect({ body, status: r.status }).toEqual({ body, status: 400 });
    }
    const big = await app.request('PUT', '/api/v1/secrets/BIG', {
      ...as(a),
      body: { value: 'x'.repeat(64 * 1024 + 1) },
    });
    expect(big.status).toBe(413);
    expect(big.body.error.code).toBe('SECRET_TOO_LARGE');
    const huge = await app.request('PUT', '/api/v1/secrets/BIG', {
      ...as(a),
      body: { value: 'x'.repeat(2 * 1024 * 1024) },
    });
    expect(huge.status).toBe(413);
    expect((await app.request('GET', '/api/v1/secrets', as(a))).body.items.length).toBe(before);
  });

  it('requires orchestrator:admin', async () => {
    const reader = await app.token(a.tenantId, ['orchestrator:read', 'orchestrator:write']);
    expect((await app.request('GET', '/api/v1/secrets', { as: { token: reader, tenantId: a.tenantId } })).status).toBe(
      403,
    );
    expect(
      (
        await app.request('PUT', '/api/v1/secrets/X', {
          as: { token: reader, tenantId: a.tenantId },
          body: { value: 'v' },
        })
      ).status,
    ).toBe(403);
    expect((await app.request('GET', '/api/v1/secrets', {})).status).toBe(401);
  });
});

describe('makeRedactor', () => {
  it('replaces raw, JSON-escaped, URL-encoded and base64 forms, longest first', () => {
    const redact = makeRedactor(['p@ss"word\\1', 'abc', 'abcdef', '']);
    expect(redact('raw p@ss"word\\1 and abcdef and abc')).toBe('raw [redacted] and [redacted] and [redacted]');
    expect(redact(JSON.stringify({ v: 'p@ss"word\\1' }))).toBe('{"v":"[redacted]"}');
    expect(redact(`q=${encodeURIComponent('p@ss"word\\1')}`)).toBe('q=[redacted]');
    expect(redact(Buffer.from('abcdef').toString('base64'))).toBe('[redacted]');
    expect(redact('nothing secret here')).toBe('nothing secret here');
    expect(makeRedactor([])('abc')).toBe('abc');
  });

  it('redacts non-ASCII values in their \\u-escaped JSON form too', () => {
    const redact = makeRedactor(['pässwörd']);
    expect(redact('"p\\u00e4ssw\\u00f6rd"')).toBe('"[redacted]"');
    expect(redact(JSON.stringify({ a: 'pässwörd' }))).toBe('{"a":"[redacted]"}');
  });
});

describe('redactJson', () => {
  it('redacts every string and key of a JSON value, and keeps its structure whatever the secret', () => {
    const redact = makeRedactor(['true', '1,2', 'k3y']);
    const value = {
      ok: true,
      list: [1, 2],
      note: 'it is true',
      k3y: ['a k3y', { deep: Buffer.from('k3y').toString('base64') }, null, 7],
      nested: JSON.stringify({ s: 'k3y' }),
    };
    expect(redactJson(redact, value)).toEqual({
      ok: true,
      list: [1, 2],
      note: 'it is [redacted]',
      '[redacted]': ['a [redacted]', { deep: '[redacted]' }, null, 7],
      nested: '{"s":"[redacted]"}',
    });
    expect(value.note).toBe('it is true');
  });
});
