import { errorEnvelopeSchema } from '../../src/core/errors/error-envelope';
import { countDiff, DbSnapshots } from '../support/fixtures/db-snapshot';
import { corpusDocument, hostileDocuments, randomDocument, type DagDocument } from '../support/fuzz/dag-documents';
import { fuzzRuns, REQUEST_TIMEOUT_MS } from '../support/fuzz/http-fuzz';
import { runFuzz } from '../support/fuzz/replay';
import { startTestApp, type TestApp } from '../support/test-app';

/**
 * POST /api/v1/dags under hostile JSON and YAML: deep nesting, alias bombs, duplicate keys, unicode
 * ids, prototype member names, out-of-range numbers, documents of several megabytes, random and
 * truncated text. Every answer is a 2xx for a valid definition or a 4xx envelope (400/413/415)
 * that wrote nothing; never a 5xx, never a hang. The random documents follow the regression
 * corpus; a failure prints ORDO_FUZZ_SEED and ORDO_FUZZ_PATH, which replay it.
 */
const MB = 1024 * 1024;

async function publish(app: TestApp, as: { token: string; tenantId: string }, doc: Pick<DagDocument, 'text' | 'type'>) {
  const res = await fetch(`${app.url}/api/v1/dags`, {
    method: 'POST',
    headers: { authorization: `Bearer ${as.token}`, 'x-tenant-id': as.tenantId, 'content-type': doc.type },
    body: doc.text,
    signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
  });
  const text = await res.text();
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    body = undefined;
  }
  return { status: res.status, text, body };
}

function expectAnswer(name: string, r: { status: number; text: string; body: unknown }, refuse: boolean) {
  const summary = { name, status: r.status, text: r.status >= 500 ? r.text.slice(0, 300) : '' };
  expect(summary).toEqual({ name, status: expect.any(Number), text: '' });
  expect(r.status).toBeLessThan(500);
  if (refuse) expect([400, 413, 415]).toContain(r.status);
  if (r.status >= 400) expect(errorEnvelopeSchema.safeParse(r.body).success).toBe(true);
}

describe('POST /api/v1/dags under hostile documents', () => {
  let app: TestApp;
  let snaps: DbSnapshots;
  let as: { token: string; tenantId: string };
  beforeAll(async () => {
    app = await startTestApp();
    as = { token: app.adminToken, tenantId: app.tenantId };
    snaps = await DbSnapshots.open(app.testDb.ownerUrl);
  });
  afterAll(async () => {
    await snaps?.close();
    await app?.close();
  });

  for (const doc of hostileDocuments()) {
    it(`${doc.refuse ? 'refuses' : 'answers'} ${doc.name} with ${doc.refuse ? 'a 4xx envelope and no write' : 'no 5xx'}`, async () => {
      const before = await snaps.counts();
      const r = await publish(app, as, doc);
      expectAnswer(doc.name, r, doc.refuse);
      if (r.status >= 400) expect(countDiff(before, await snaps.counts())).toEqual([]);
    });
  }

  it('refuses 5 MB JSON and YAML documents with 413 (over the body limit) and writes nothing', async () => {
    const before = await snaps.counts();
    const big = 'x'.repeat(5 * MB);
    const jsonDoc = `{"id":"big","steps":[{"id":"s1","plugin":"noop","with":{"output":{"x":"${big}"}}}]}`;
    const yamlDoc = `id: big\nsteps:\n  - id: s1\n    plugin: noop\n    with:\n      output:\n        x: ${big}\n`;
    for (const [text, type] of [
      [jsonDoc, 'application/json'],
      [yamlDoc, 'application/yaml'],
    ] as const) {
      const r = await publish(app, as, { text, type });
      expect({ type, status: r.status }).toEqual({ type, status: 413 });
      expect(errorEnvelopeSchema.safeParse(r.body).success).toBe(true);
    }
    expect(countDiff(before, await snaps.counts())).toEqual([]);
  });

  it('answers a published DAG whose inputs schema refers to itself, and runs of it, without a 5xx', async () => {
    const doc = {
      text: JSON.stringify({
        id: 'recursive-inputs',
        inputs: { $defs: { x: { $ref: '#/$defs/x' } }, $ref: '#/$defs/x' },
        steps: [{ id: 's1', plugin: 'noop' }],
      }),
      type: 'application/json' as const,
    };
    const pub = await publish(app, as, doc);
    expectAnswer('recursive inputs schema', pub, false);
    if (pub.status >= 300) return;
    const before = await snaps.counts();
    const run = await app.request('POST', '/api/v1/runs', {
      as,
      body: { dagId: 'recursive-inputs', inputs: { a: 1 }, runToken: 'recursive-1' },
    });
    expect({ status: run.status, text: run.status >= 500 ? run.text : '' }).toEqual({ status: run.status, text: '' });
    expect(run.status).toBeLessThan(500);
    if (run.status >= 400) expect(countDiff(before, await snaps.counts())).toEqual([]);
  });

  it(`answers ${fuzzRuns(150)} random, truncated and noisy documents with a 2xx or a 4xx envelope`, async () => {
    await runFuzz({
      fuzzer: 'dag-documents',
      arbitrary: randomDocument,
      runs: fuzzRuns(150),
      fromCorpus: corpusDocument,
      check: async (doc) => {
        const r = await publish(app, as, doc);
        if (r.status >= 500 || (r.status >= 400 && !errorEnvelopeSchema.safeParse(r.body).success)) {
          throw new Error(
            `${doc.type} ${JSON.stringify(doc.text).slice(0, 400)}\n  → ${r.status} ${r.text.slice(0, 300)}`,
          );
        }
      },
    });
  });
});

describe('POST /api/v1/dags with an 8 MiB body limit', () => {
  let app: TestApp;
  beforeAll(async () => {
    app = await startTestApp({ ORDO_BODY_LIMIT_BYTES: String(8 * MB) });
  });
  afterAll(async () => app?.close());

  it('refuses 5 MB documents that reach the parser (nesting, YAML size, oversized fields) with 400/413', async () => {
    const as = { token: app.adminToken, tenantId: app.tenantId };
    const n = 2_500_000;
    const docs: [string, string, DagDocument['type']][] = [
      ['5 MB of JSON nesting', `${'['.repeat(n)}${']'.repeat(n)}`, 'application/json'],
      [
        '5 MB of JSON nesting inside a step',
        `{"id":"a","steps":[{"id":"s1","plugin":"noop","with":{"output":{"x":${'['.repeat(n)}${']'.repeat(n)}}}}]}`,
        'application/json',
      ],
      [
        '5 MB of YAML',
        `id: a\nsteps:\n  - id: s1\n    plugin: noop\n    description: ${'y'.repeat(5 * MB)}\n`,
        'application/yaml',
      ],
      ['5 MB of YAML flow nesting', `id: a\nsteps: ${'['.repeat(n)}${']'.repeat(n)}\n`, 'application/yaml'],
      [
        'a 5 MB step description',
        `{"id":"a","steps":[{"id":"s1","plugin":"noop","description":"${'d'.repeat(5 * MB)}"}]}`,
        'application/json',
      ],
    ];
    for (const [name, text, type] of docs) {
      const r = await publish(app, as, { text, type });
      expectAnswer(name, r, true);
    }
  });
});
