import http from 'node:http';
import zlib from 'node:zlib';
import pg from 'pg';
import { startTestApp, type TestApp } from '../support/test-app';

/** A raw GET (no automatic decompression), so the content-encoding on the wire is visible. */
function rawGet(
  url: string,
  headers: Record<string, string>,
): Promise<{ status: number; headers: http.IncomingHttpHeaders; body: Buffer }> {
  return new Promise((resolve, reject) => {
    const req = http.get(url, { headers }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks) }));
      res.on('error', reject);
    });
    req.on('error', reject);
  });
}

describe('health, readiness and compression', () => {
  let app: TestApp;
  beforeAll(async () => {
    app = await startTestApp();
  });
  afterAll(async () => app.close());

  it('answers /healthz with 200 without credentials', async () => {
    const r = await app.request('GET', '/healthz');
    expect(r.status).toBe(200);
    expect(r.body).toEqual({ status: 'ok' });
  });

  it('answers /readyz with 200 when the database is reachable and migrations are current', async () => {
    const r = await app.request('GET', '/readyz');
    expect(r.status).toBe(200);
    expect(r.body).toEqual({ status: 'ok', checks: { database: 'ok', migrations: 'ok' } });
  });

  it('answers /readyz with 503 while the database refuses connections, and 200 once it is back', async () => {
    const owner = new pg.Client({ connectionString: app.testDb.ownerUrl.replace(/\/[^/]+$/, '/postgres') });
    await owner.connect();
    const name = app.testDb.name;
    try {
      await owner.query(`alter database ${name} allow_connections false`);
      await owner.query(
        `select pg_terminate_backend(pid) from pg_stat_activity where datname = $1 and pid <> pg_backend_pid()`,
        [name],
      );
      let r = await app.request('GET', '/readyz');
      // A pooled connection may die under the first check; the next one sees the refusal.
      if (r.status === 200) r = await app.request('GET', '/readyz');
      expect(r.status).toBe(503);
      expect(r.body.status).toBe('unavailable');
      expect(r.body.checks.database).toMatch(/^unreachable/);
      expect((await app.request('GET', '/healthz')).status).toBe(200);
    } finally {
      await owner.query(`alter database ${name} allow_connections true`);
      await owner.end();
    }
    let back = await app.request('GET', '/readyz');
    for (let i = 0; i < 5 && back.status !== 200; i++) back = await app.request('GET', '/readyz');
    expect(back.status).toBe(200);
  });

  it.each([
    ['gzip', (b: Buffer) => zlib.gunzipSync(b)],
    ['br', (b: Buffer) => zlib.brotliDecompressSync(b)],
  ])('compresses a large response with %s when the client accepts it', async (encoding, decode) => {
    const r = await rawGet(`${app.url}/api/v1/openapi.json`, { 'accept-encoding': encoding });
    expect(r.status).toBe(200);
    expect(r.headers['content-encoding']).toBe(encoding);
    const json = JSON.parse(decode(r.body).toString('utf8')) as { openapi: string };
    expect(json.openapi).toBe('3.1.0');
    expect(r.body.length).toBeLessThan(decode(r.body).length);
  });

  it('sends an identity response when the client accepts no compression', async () => {
    const r = await rawGet(`${app.url}/api/v1/openapi.json`, { 'accept-encoding': 'identity' });
    expect(r.status).toBe(200);
    expect(r.headers['content-encoding']).toBeUndefined();
    expect((JSON.parse(r.body.toString('utf8')) as { openapi: string }).openapi).toBe('3.1.0');
  });
});
