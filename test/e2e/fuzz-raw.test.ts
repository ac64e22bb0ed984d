import fc from 'fast-check';
import { countDiff, DbSnapshots } from '../support/fixtures/db-snapshot';
import { buildTenantFixtures, resolvePathParams, type TenantFixtures } from '../support/fixtures/tenant-fixtures';
import { prototypeKey } from '../support/fuzz/arbitrary-from-schema';
import { checkOutcome, fuzzRuns, sampleBody, send, type Caller, type FuzzRequest } from '../support/fuzz/http-fuzz';
import { deref, loadOperations, MUTATING, type OpenApiDocument, type Operation } from '../support/fuzz/openapi-doc';
import { namingFixtures, runFuzz, withFixtures } from '../support/fuzz/replay';
import { staticApiRoutes } from '../support/fuzz/static-routes';
import { startTestApp, type TestApp } from '../support/test-app';

/**
 * Raw request bodies against every mutating operation: random bytes, truncated JSON, content types
 * the route does not take, bodies over the limit, numbers JSON.parse turns into Infinity, and
 * prototype member names as keys. Each must be a 4xx in the error envelope that wrote
 * nothing. Each operation replays its regression corpus entries first; then ORDO_FUZZ_RUNS random
 * cases (CI: 25 per operation). A failure prints ORDO_FUZZ_SEED and ORDO_FUZZ_PATH, which replay it.
 */
const RUNS = fuzzRuns(25);
const ROUTES = staticApiRoutes().filter((r) => MUTATING.has(r.method));
const TENANT = 'fuzz-raw';
const WRONG_TYPES = [
  'text/plain',
  'application/xml',
  'multipart/form-data; boundary=x',
  'application/x-www-form-urlencoded',
  'application/octet-stream',
  'application/gzip',
  'application/json; charset=utf-16',
  'application/vnd.evil+xml',
  'image/png',
];

describe(`raw bodies against every mutating operation (${RUNS} per operation)`, () => {
  let app: TestApp;
  let doc: OpenApiDocument;
  let ops: Map<string, Operation>;
  let fx: TenantFixtures;
  let snaps: DbSnapshots;
  let token: string;

  beforeAll(async () => {
    app = await startTestApp();
    token = (await app.tenant(TENANT)).token;
    await app.tenant('fuzz-raw-victim');
    fx = await buildTenantFixtures(app, { token, tenantId: TENANT });
    fx.values.tenantId = 'fuzz-raw-victim';
    const loaded = await loadOperations(app);
    doc = loaded.doc;
    ops = new Map(loaded.operations.map((o) => [o.label, o]));
    snaps = await DbSnapshots.open(app.testDb.ownerUrl);
  });
  afterAll(async () => {
    await snaps?.close();
    await app?.close();
  });

  /** Raw bodies built around the operation's valid sample body. */
  const rawBodies = (op: Operation): fc.Arbitrary<{ raw: string | Buffer; type: string }> => {
    const valid = JSON.stringify(sampleBody(op, doc, fx) ?? { a: 1 });
    const props = op.bodySchema ? Object.keys((deref(op.bodySchema, doc).properties as object | undefined) ?? {}) : [];
    const notJson = (b: Uint8Array) => {
      try {
        JSON.parse(Buffer.from(b).toString('utf8'));
        return false;
      } catch {
        return true;
      }
    };
    const wrongTypes = WRONG_TYPES.filter((t) => !op.bodyContentTypes.includes(t.split(';')[0]));
    const arbs: fc.Arbitrary<{ raw: string | Buffer; type: string }>[] = [
      fc
        .uint8Array({ minLength: 1, maxLength: 2048 })
        .filter(notJson)
        .map((b) => ({ raw: Buffer.from(b), type: 'application/json' })),
      fc
        .integer({ min: 1, max: Math.max(1, valid.length - 1) })
        .map((n) => ({ raw: valid.slice(0, n), type: 'application/json' })),
      fc.constantFrom(...wrongTypes).map((type) => ({ raw: valid, type })),
      fc.constant({ raw: Buffer.alloc(app.config.ORDO_BODY_LIMIT_BYTES + 1, 0x61), type: 'application/json' }),
      fc.constant({ raw: `"${'a'.repeat(app.config.ORDO_BODY_LIMIT_BYTES)}"`, type: 'application/json' }),
    ];
    if (props.length) {
      arbs.push(
        fc
          .tuple(
            fc.constantFrom(...props),
            fc.constantFrom('1e309', '-1e309', '{"a":1e309}', '[1e309]', '{"a":{"b":-1e400000}}'),
          )
          .map(([prop, lit]) => {
            const o = JSON.parse(valid) as Record<string, unknown>;
            o[prop] = '__NUMBER__';
            return { raw: JSON.stringify(o).replace('"__NUMBER__"', lit), type: 'application/json' };
          }),
      );
    }
    if (valid.startsWith('{')) {
      // A prototype member name as a key of the body, written as JSON.parse reads it (an own key).
      arbs.push(
        fc
          .tuple(prototypeKey, fc.constantFrom('1', '"x"', '{"polluted":true}', '{"prototype":{"polluted":true}}'))
          .map(([name, value]) => ({
            raw: `{${JSON.stringify(name)}:${value}${valid === '{}' ? '' : ','}${valid.slice(1)}`,
            type: 'application/json',
          })),
      );
    }
    return fc.oneof(...arbs);
  };

  for (const r of ROUTES) {
    it(`${r.label} answers random, truncated, mistyped, oversize and non-finite bodies with a 4xx envelope and no write`, async () => {
      const op = ops.get(r.label)!;
      const headers: Record<string, string> =
        op.access === 'platform:admin'
          ? { authorization: `Bearer ${app.platformToken}` }
          : { authorization: `Bearer ${token}`, 'x-tenant-id': TENANT };
      const caller: Caller = { baseUrl: app.url, headers };
      const pathValues: Record<string, string> = {};
      for (const p of op.pathParams) pathValues[p.name] = 'placeholder';
      Object.assign(pathValues, resolvePathParams(op.path, fx).values);
      await runFuzz({
        fuzzer: 'raw-bodies',
        test: op.label,
        arbitrary: rawBodies(op),
        runs: RUNS,
        fromCorpus: (input) => withFixtures(input as { raw: string; type: string }, fx.values),
        // Bytes have no JSON form: such a case is recorded by its seed and path.
        toCorpus: (body) => (typeof body.raw === 'string' ? namingFixtures(body, fx.values) : undefined),
        check: async (body) => {
          const req: FuzzRequest = { path: pathValues, query: {}, body, snapshot: true };
          const before = await snaps.counts();
          const out = await send(caller, op, req);
          await checkOutcome(op, req, out, { before, after: () => snaps.counts() });
          if (out.status < 400 || out.status >= 500) {
            throw new Error(
              `${body.type} ${String(body.raw).slice(0, 300)}\n  → ${out.status} ${out.text.slice(0, 300)}\n  expected a 4xx`,
            );
          }
        },
      });
    });
  }
});

describe('text and numbers PostgreSQL and canonical JSON cannot hold', () => {
  let app: TestApp;
  let fx: TenantFixtures;
  let snaps: DbSnapshots;
  beforeAll(async () => {
    app = await startTestApp();
    fx = await buildTenantFixtures(app, { token: app.adminToken, tenantId: app.tenantId });
    snaps = await DbSnapshots.open(app.testDb.ownerUrl);
  });
  afterAll(async () => {
    await snaps?.close();
    await app?.close();
  });

  const cases: [string, string, (fx: TenantFixtures) => string, boolean?][] = [
    ['POST', '/api/v1/runs', (f) => `{"dagId":"${f.values.dagId}","runToken":"t1","inputs":{"a":1e309}}`],
    ['POST', '/api/v1/runs', (f) => `{"dagId":"${f.values.dagId}","runToken":"t2","inputs":{"a":"\\u0000"}}`],
    ['POST', '/api/v1/runs', (f) => `{"dagId":"${f.values.dagId}","runToken":"t3\\u0000","inputs":{}}`],
    ['POST', '/api/v1/runs', (f) => `{"dagId":"${f.values.dagId}","runToken":"t4","inputs":{"\\u0000":1}}`],
    ['POST', '/api/v1/runs', (f) => `{"dagId":"${f.values.dagId}","runToken":"t5","inputs":{"a":"\\ud800"}}`],
    [
      'POST',
      '/api/v1/runs',
      (f) => `{"dagId":"${f.values.dagId}","runToken":"t6","inputs":{"a":${'['.repeat(300)}${']'.repeat(300)}}}`,
    ],
    [
      'POST',
      '/api/v1/schedules',
      (f) => `{"dagId":"${f.values.dagId}","cron":"0 0 1 1 *","timezone":"UTC","inputs":{"a":"\\u0000"}}`,
    ],
    [
      'POST',
      '/api/v1/schedules',
      (f) => `{"dagId":"${f.values.dagId}","cron":"0 0 1 1 *","timezone":"UTC","inputs":{"a":1e309}}`,
    ],
    ['PUT', '/api/v1/secrets/NUL', () => `{"value":"a\\u0000b"}`],
    ['PUT', '/api/v1/secrets/SURROGATE', () => `{"value":"\\ud800"}`],
    ['POST', '/api/v1/tokens', () => `{"scopes":["orchestrator:read"],"description":"a\\u0000b"}`],
    ['POST', '/api/v1/tenants', () => `{"id":"t-nul","name":"a\\u0000b"}`, true],
    ['POST', '/api/v1/dags', () => `{"id":"nul","description":"a\\u0000b","steps":[{"id":"s1","plugin":"noop"}]}`],
    [
      'POST',
      '/api/v1/dags',
      () => `{"id":"nul2","steps":[{"id":"s1","plugin":"noop","with":{"output":{"\\u0000":1}}}]}`,
    ],
  ];
  for (const [method, url, body, platform] of cases) {
    const shown = body({ values: { dagId: '<dag>' } } as unknown as TenantFixtures).slice(0, 90);
    it(`answers ${method} ${url} ${shown} with 400 and writes nothing`, async () => {
      const before = await snaps.counts();
      const r = await app.request(method, url, {
        as: platform ? { token: app.platformToken } : { token: app.adminToken, tenantId: app.tenantId },
        rawBody: body(fx),
        headers: { 'content-type': 'application/json' },
      });
      expect({ status: r.status, code: r.body?.error?.code }).toEqual({ status: 400, code: 'VALIDATION_FAILED' });
      expect(countDiff(before, await snaps.counts())).toEqual([]);
    });
  }

  it('still accepts text with emoji, RTL marks and combining characters (well-formed Unicode)', async () => {
    const r = await app.request('PUT', '/api/v1/secrets/UNICODE', {
      as: { token: app.adminToken, tenantId: app.tenantId },
      body: { value: '😀 \u202eשלום\u202c e\u0301 \ud83d\udc68\u200d\ud83d\udc69' },
    });
    expect({ status: r.status, created: r.body?.created }).toEqual({ status: 200, created: true });
  });
});
