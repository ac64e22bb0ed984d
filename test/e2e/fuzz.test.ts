import { DbSnapshots } from '../support/fixtures/db-snapshot';
import { buildTenantFixtures, type TenantFixtures } from '../support/fixtures/tenant-fixtures';
import { fuzzOperation, fuzzRuns, prototypeExamples, requestArbitrary, type Caller } from '../support/fuzz/http-fuzz';
import { loadOperations, type OpenApiDocument, type Operation } from '../support/fuzz/openapi-doc';
import { staticApiRoutes } from '../support/fuzz/static-routes';
import { startTestApp, type TestApp } from '../support/test-app';

/**
 * Hostile-input fuzzing of every operation of the OpenAPI document, generated from its request
 * schemas (valid requests with the tenant's real ids, near-misses and hostile values). Each
 * operation first replays its entries of the regression corpus (test/support/fuzz/regressions.json)
 * and requests with `constructor` and `__proto__` in each string slot, then ORDO_FUZZ_RUNS random
 * cases (default 60; on demand: ORDO_FUZZ_RUNS=1000). A failure prints ORDO_FUZZ_SEED and
 * ORDO_FUZZ_PATH, which replay it.
 */
const RUNS = fuzzRuns(60);
/** Operations that delete, disable or revoke a fixture run last, so the others still find it. */
const destroys = (label: string) => /^DELETE |\/(disable|revoke)$/.test(label);
const ROUTES = [...staticApiRoutes()].sort((a, b) => Number(destroys(a.label)) - Number(destroys(b.label)));
const TENANT = 'fuzz';
const VICTIM = 'fuzz-victim';

describe(`fuzzing every operation with ${RUNS} generated requests`, () => {
  let app: TestApp;
  let doc: OpenApiDocument;
  let ops: Map<string, Operation>;
  let fx: TenantFixtures;
  let snaps: DbSnapshots;
  let tenantToken: string;

  beforeAll(async () => {
    app = await startTestApp();
    tenantToken = (await app.tenant(TENANT)).token;
    await app.tenant(VICTIM);
    fx = await buildTenantFixtures(app, { token: tenantToken, tenantId: TENANT });
    // Platform routes act on another tenant, so disabling it leaves the fuzzing tenant working.
    fx.values.tenantId = VICTIM;
    const loaded = await loadOperations(app);
    doc = loaded.doc;
    ops = new Map(loaded.operations.map((o) => [o.label, o]));
    snaps = await DbSnapshots.open(app.testDb.ownerUrl);
  });
  afterAll(async () => {
    await snaps?.close();
    await app?.close();
  });

  it('fuzzes exactly the operations of the served document', () => {
    expect(ROUTES.map((r) => r.label).sort()).toEqual([...ops.keys()].sort());
  });

  for (const r of ROUTES) {
    it(`${r.label} answers ${RUNS} generated requests without a 5xx or a hang, with documented bodies, writing nothing when it rejects`, async () => {
      const op = ops.get(r.label);
      if (!op) throw new Error(`${r.label} is not in the served document`);
      const headers: Record<string, string> =
        op.access === 'public'
          ? {}
          : op.access === 'platform:admin'
            ? { authorization: `Bearer ${app.platformToken}` }
            : { authorization: `Bearer ${tenantToken}`, 'x-tenant-id': TENANT };
      const caller: Caller = { baseUrl: app.url, headers };
      await fuzzOperation(caller, op, requestArbitrary(op, doc, fx), snaps, RUNS, {
        fx,
        examples: prototypeExamples(op, doc, fx),
      });
    });
  }
});
