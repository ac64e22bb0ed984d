import { createHash, randomBytes, randomUUID } from 'node:crypto';
import { Readable } from 'node:stream';
import type { ReadableStream as WebReadableStream } from 'node:stream/web';
import ndjson from 'ndjson';
import type { SystemDb } from '../../src/core/database/handles';
import { runSchema } from '../../src/modules/runs/runs.dto';
import { STREAM_PAGE } from '../../src/modules/runs/runs-ndjson';
import { startTestApp, type TestApp } from '../support/test-app';

const NDJSON = 'application/x-ndjson';
const BASE = Date.parse('2026-02-01T00:00:00.000Z');

/**
 * Inserts `n` runs straight into the table: created one second apart in threes (runs that share a
 * created_at are ordered by runId, so pages end inside a tie), every fifth one failed.
 */
async function insertRuns(db: SystemDb, tenantId: string, dagId: string, n: number, offset = 0): Promise<void> {
  const rows = Array.from({ length: n }, (_, k) => {
    const i = k + offset;
    const runId = randomUUID();
    const inputs = { i };
    return {
      tenant_id: tenantId,
      run_id: runId,
      dag_id: dagId,
      dag_version: 1,
      content_hash: 'c'.repeat(64),
      run_token: `tok-${runId}`,
      inputs: JSON.stringify(inputs),
      inputs_hash: createHash('sha256').update(JSON.stringify(inputs)).digest('hex'),
      status: i % 5 === 0 ? 'failed' : 'succeeded',
      trace_id: randomBytes(16).toString('hex'),
      requested_by: 'test',
      created_at: new Date(BASE + Math.floor(i / 3) * 1000),
      started_at: new Date(BASE + Math.floor(i / 3) * 1000),
      finished_at: new Date(BASE + Math.floor(i / 3) * 1000 + 500),
      steps_total: 1,
      steps_remaining: 0,
    };
  });
  for (let k = 0; k < rows.length; k += 1000)
    await db
      .insertInto('run')
      .values(rows.slice(k, k + 1000))
      .execute();
}

describe('GET /api/v1/runs as NDJSON', () => {
  let app: TestApp;
  let as: { token: string; tenantId: string };
  let asB: { token: string; tenantId: string };
  const COUNT = 2 * STREAM_PAGE + 201;

  beforeAll(async () => {
    app = await startTestApp();
    as = { token: app.adminToken, tenantId: app.tenantId };
    const b = await app.tenant('ndjson-b', ['orchestrator:read']);
    asB = { token: b.token, tenantId: b.tenantId };
    await insertRuns(app.ordo.database.system, app.tenantId, 'bulk', COUNT);
    await insertRuns(app.ordo.database.system, app.tenantId, 'other', 7, COUNT);
    await insertRuns(app.ordo.database.system, b.tenantId, 'bulk', 4);
  });
  afterAll(async () => app.close());

  const ndjsonGet = (url: string, who = as, accept = NDJSON) =>
    app.request('GET', url, { as: who, headers: { accept } });

  /** The body as lines, each checked to be exactly one JSON object; the body ends with a newline. */
  const objects = (text: string): Record<string, unknown>[] => {
    if (text === '') return [];
    expect(text.endsWith('\n')).toBe(true);
    return text
      .slice(0, -1)
      .split('\n')
      .map((line) => {
        const v = JSON.parse(line) as unknown;
        expect(v !== null && typeof v === 'object' && !Array.isArray(v)).toBe(true);
        return v as Record<string, unknown>;
      });
  };

  /** Every item of the JSON form of a query, following its page tokens. */
  const jsonItems = async (query: string, who = as): Promise<Record<string, unknown>[]> => {
    const items: Record<string, unknown>[] = [];
    let token: string | null = null;
    do {
      const r = await app.request(
        'GET',
        `/api/v1/runs?${query}&limit=500${token ? `&pageToken=${encodeURIComponent(token)}` : ''}`,
        { as: who },
      );
      expect(r.status).toBe(200);
      items.push(...(r.body.items as Record<string, unknown>[]));
      token = r.body.nextPageToken as string | null;
    } while (token);
    return items;
  };

  it('streams every matching run, one JSON object a line, the same objects in the same order as the JSON pages', async () => {
    const r = await ndjsonGet('/api/v1/runs?dagId=bulk');
    expect(r.status).toBe(200);
    expect(r.headers.get('content-type')).toBe('application/x-ndjson; charset=utf-8');
    expect(r.headers.get('vary')).toMatch(/accept(,|$)/i);
    const lines = objects(r.text);
    expect(lines).toHaveLength(COUNT);
    for (const run of lines.slice(0, 3)) expect(runSchema.safeParse(run).success).toBe(true);
    expect(new Set(lines.map((x) => x.runId)).size).toBe(COUNT);
    expect(lines).toEqual(await jsonItems('dagId=bulk'));
  });

  it('arrives as a stream a client reads one run at a time', async () => {
    const res = await fetch(`${app.url}/api/v1/runs`, {
      headers: { authorization: `Bearer ${as.token}`, 'x-tenant-id': as.tenantId, accept: NDJSON },
    });
    expect(res.headers.get('content-length')).toBeNull();
    let n = 0;
    let previous = '';
    const body = Readable.fromWeb(res.body as WebReadableStream<Uint8Array>);
    for await (const run of body.pipe(ndjson.parse()) as AsyncIterable<Record<string, string>>) {
      n += 1;
      // Newest first: startedUtc never increases down the stream.
      if (previous) expect(run.startedUtc <= previous).toBe(true);
      previous = run.startedUtc;
    }
    expect(n).toBe(COUNT + 7);
  });

  it('applies the filters of the JSON form: dagId, status, from and to', async () => {
    const from = new Date(BASE + 100_000).toISOString();
    const to = new Date(BASE + 300_000).toISOString();
    for (const query of [
      'dagId=other',
      'status=failed',
      'dagId=bulk&status=succeeded',
      `from=${from}&to=${to}`,
      `dagId=bulk&status=failed&from=${from}`,
    ]) {
      const r = await ndjsonGet(`/api/v1/runs?${query}`);
      expect(r.status).toBe(200);
      const expected = await jsonItems(query);
      expect(expected.length).toBeGreaterThan(0);
      expect({ query, runs: objects(r.text) }).toEqual({ query, runs: expected });
    }
    const none = await ndjsonGet(`/api/v1/runs?from=${new Date(Date.now() + 60_000).toISOString()}`);
    expect(none.status).toBe(200);
    expect(none.text).toBe('');
  });

  it('caps the lines at limit when given, and starts after pageToken', async () => {
    const all = await jsonItems('dagId=bulk');
    const capped = objects((await ndjsonGet('/api/v1/runs?dagId=bulk&limit=7')).text);
    expect(capped).toEqual(all.slice(0, 7));
    const page = await app.request('GET', '/api/v1/runs?dagId=bulk&limit=250', { as });
    const rest = objects((await ndjsonGet(`/api/v1/runs?dagId=bulk&pageToken=${page.body.nextPageToken}`)).text);
    expect(rest).toEqual(all.slice(250));
  });

  it('answers bad queries and tokens in the JSON error envelope before any line', async () => {
    for (const [query, code] of [
      ['pageToken=garbage', 'INVALID_PAGE_TOKEN'],
      ['status=weird', 'VALIDATION_FAILED'],
      ['limit=0', 'VALIDATION_FAILED'],
    ]) {
      const r = await ndjsonGet(`/api/v1/runs?${query}`);
      expect([query, r.status, r.body?.error?.code]).toEqual([query, 400, code]);
      expect(r.headers.get('content-type')).toMatch(/^application\/json/);
    }
    const anonymous = await app.request('GET', '/api/v1/runs', { headers: { accept: NDJSON } });
    expect(anonymous.status).toBe(401);
    expect(anonymous.body.error).toBeDefined();
  });

  it('gives tenant B only its own runs, and refuses A’s token for B', async () => {
    const a = objects((await ndjsonGet('/api/v1/runs')).text);
    const b = objects((await ndjsonGet('/api/v1/runs', asB)).text);
    expect(b).toHaveLength(4);
    const idsA = new Set(a.map((x) => x.runId));
    for (const run of b) expect(idsA.has(run.runId)).toBe(false);
    expect(b).toEqual(await jsonItems('dagId=bulk', asB));
    const aWithB = await ndjsonGet('/api/v1/runs', { token: as.token, tenantId: asB.tenantId });
    expect(aWithB.status).toBe(403);
    expect(aWithB.text).not.toContain('"runId"');
  });

  it.each([
    ['application/json', false],
    ['*/*', false],
    ['application/*', false],
    ['application/x-ndjson;q=0.1, application/json', false],
    ['application/json;q=0.5, application/x-ndjson', true],
    ['application/x-ndjson, */*', true],
    ['application/x-ndjson;q=0', false],
  ])('answers Accept %p with NDJSON: %p', async (accept, isNdjson) => {
    const r = await ndjsonGet('/api/v1/runs?dagId=other&limit=2', as, accept);
    expect(r.status).toBe(200);
    expect(r.headers.get('content-type')?.startsWith(isNdjson ? NDJSON : 'application/json')).toBe(true);
    if (isNdjson) expect(objects(r.text)).toHaveLength(2);
    else expect(r.body.items).toHaveLength(2);
  });

  it('documents the NDJSON form of listRuns in the OpenAPI document, one Run an item', async () => {
    const r = await app.request('GET', '/api/v1/openapi.json');
    const content = r.body.paths['/api/v1/runs'].get.responses['200'].content as Record<string, Record<string, any>>;
    expect(Object.keys(content).sort()).toEqual(['application/json', NDJSON]);
    expect(content[NDJSON]).toEqual({
      schema: { type: 'array', items: { $ref: '#/components/schemas/Run' } },
      'x-oai-itemSchema': { $ref: '#/components/schemas/Run' },
    });
    expect(r.body.components.schemas.Run).toBeDefined();
  });
});
