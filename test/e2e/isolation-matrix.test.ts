import { createHmac, randomUUID } from 'node:crypto';
import { SignJWT, exportSPKI, type JWTPayload } from 'jose';
import pg from 'pg';
import { SCOPES, type TenantScope } from '../../src/core/http/route-spec';
import { SigningKeys } from '../../src/modules/auth/signing-keys';
import { sample, valid } from '../support/fuzz/arbitrary-from-schema';
import {
  deref,
  fillPath,
  loadOperations,
  queryString,
  type OpenApiDocument,
  type Operation,
} from '../support/fuzz/openapi-doc';
import { staticApiRoutes, type StaticRoute } from '../support/fuzz/static-routes';
import { countDiff, DbSnapshots } from '../support/fixtures/db-snapshot';
import {
  buildTenantFixtures,
  ID_PROPERTIES,
  QUERY_RECIPES,
  RECIPES,
  collectionOf,
  queryFixture,
  recipeKeysOf,
  resolvePathParams,
  type TenantFixtures,
} from '../support/fixtures/tenant-fixtures';
import { startTestApp, type TestApp, type TestResponse } from '../support/test-app';

/**
 * The isolation matrix: every operation of the application's route table, called with no token,
 * an expired token, another tenant's token, a token lacking the scope, and another tenant's ids in
 * path, query and body, expecting 401/403/404, no data of the other tenant, and no write. Test
 * rows are generated from the route metadata, so a new route is covered without editing this file
 * (and fails here until its path parameters have a fixture recipe).
 */

const A = 'tenant-alpha';
const B = 'tenant-beta';
const ROUTES = staticApiRoutes();

const RESOURCE: Record<string, string> = {
  dagId: 'DAG',
  version: 'DAG version',
  runId: 'run',
  deadLetterRunId: 'dead-letter entry',
  stepId: 'run step',
  artifactSha256: 'artifact',
  bundleHash: 'bundle',
  scheduleId: 'schedule',
  secretName: 'secret',
  tokenJti: 'token',
  trustKid: 'trust key',
  tenantId: 'tenant',
  signalId: 'signal',
};

const isTenantRoute = (r: StaticRoute) => r.spec.access !== 'public' && r.spec.access !== 'platform:admin';
const lacking = (access: string): TenantScope[] => {
  const i = SCOPES.indexOf(access as TenantScope);
  return i < 0 ? [] : SCOPES.slice(0, i);
};
const shapeKeys = (schema: unknown): string[] =>
  Object.keys((schema as { shape?: Record<string, unknown> } | undefined)?.shape ?? {});
const resourceOf = (r: StaticRoute) => {
  const keys = recipeKeysOf(r.path);
  const last = keys[keys.length - 1];
  return last ? (RESOURCE[RECIPES[last.key] ?? ID_PROPERTIES[last.name] ?? ''] ?? last.name) : '';
};
/** A value of the same shape that no tenant has: the last character changed. */
const fresh = (v: string): string => {
  if (/^\d+$/.test(v)) return String(Number(v) + 1000);
  const c = v[v.length - 1];
  const hex = '0123456789abcdef';
  const next = hex.includes(c) ? hex[(hex.indexOf(c) + 7) % 16] : c === 'z' ? 'y' : 'z';
  return v.slice(0, -1) + next;
};

describe('isolation matrix over every operation of the route table', () => {
  let app: TestApp;
  let doc: OpenApiDocument;
  let ops: Map<string, Operation>;
  let fx: TenantFixtures;
  let snaps: DbSnapshots;
  const tokens: {
    a: Record<TenantScope, string>;
    b: Record<TenantScope, string>;
    expiredTenant: string;
    expiredPlatform: string;
    /** Worker tokens of A (the fixture pool) and B. */
    workerA: string;
    workerB: string;
  } = {} as never;

  beforeAll(async () => {
    app = await startTestApp({ ORDO_ROLES: 'api,worker' });
    for (const t of [A, B]) await app.tenant(t);
    const mint = async (t: string) =>
      Object.fromEntries(await Promise.all(SCOPES.map(async (s) => [s, await app.token(t, [s])]))) as Record<
        TenantScope,
        string
      >;
    tokens.a = await mint(A);
    tokens.b = await mint(B);
    const keys = app.ordo.app.get(SigningKeys);
    const expire = (token: string) => {
      const claims = JSON.parse(Buffer.from(token.split('.')[1], 'base64url').toString()) as JWTPayload;
      const now = Math.floor(Date.now() / 1000);
      return new SignJWT({ ...claims, iat: now - 7200, exp: now - 3600 })
        .setProtectedHeader({ alg: 'EdDSA', kid: keys.active.kid, typ: 'JWT' })
        .sign(keys.active.privateKey);
    };
    tokens.expiredTenant = await expire(tokens.a['orchestrator:admin']);
    tokens.expiredPlatform = await expire(app.platformToken);
    fx = await buildTenantFixtures(app, { token: tokens.a['orchestrator:admin'], tenantId: A }, { waitForRun: true });
    tokens.workerA = fx.workerToken ?? '';
    const minted = await app.request('POST', '/api/v1/tokens', {
      as: { token: tokens.b['orchestrator:admin'], tenantId: B },
      body: { scopes: ['worker'], pool: fx.values.pool ?? 'default' },
    });
    tokens.workerB = minted.body.token as string;
    ({ doc, operations: ops } = await loadOperations(app).then((l) => ({
      doc: l.doc,
      operations: new Map(l.operations.map((o) => [o.label, o])),
    })));
    snaps = await DbSnapshots.open(app.testDb.ownerUrl);
    await snaps.settle();
  });
  afterAll(async () => {
    await snaps?.close();
    await app?.close();
  });

  const opOf = (r: StaticRoute): Operation => {
    const op = ops.get(r.label);
    if (!op) throw new Error(`${r.label} is not in the served OpenAPI document`);
    return op;
  };
  const ctx = () => ({ deref: (s: Record<string, unknown>) => deref(s, doc) });
  /** The token of the kind a route takes (worker routes take worker tokens), of tenant A or B. */
  const adminOf = (r: { spec: { access: string } }, side: 'a' | 'b') =>
    r.spec.access === 'worker'
      ? side === 'a'
        ? tokens.workerA
        : tokens.workerB
      : (side === 'a' ? tokens.a : tokens.b)['orchestrator:admin'];

  /** Path values: tenant A's fixtures where built, else a schema-valid placeholder. */
  const pathValues = (op: Operation): Record<string, string> => {
    const { values } = resolvePathParams(op.path, fx);
    for (const p of op.pathParams) values[p.name] ??= String(sample(valid(p.schema, ctx())));
    return values;
  };
  /** A body that passes validation where the schema allows, with tenant A's ids for id-named properties. */
  const bodyOf = (op: Operation, ids: TenantFixtures | null = fx): unknown => {
    if (!op.bodySchema) return undefined;
    const s = deref(op.bodySchema, doc);
    const body = sample(valid(s, ctx())) as Record<string, unknown>;
    if (body && typeof body === 'object' && !Array.isArray(body)) {
      const props = (s.properties as Record<string, Record<string, unknown>> | undefined) ?? {};
      for (const [k, v] of Object.entries(fx.examples)) if (k in props) body[k] = v;
      for (const [k, field] of Object.entries(ID_PROPERTIES)) {
        if (!(k in props) || !ids) continue;
        const v = ids.values[field];
        if (v === undefined) continue;
        body[k] = JSON.stringify(deref(props[k], doc)).includes('"integer"') ? Number(v) : v;
      }
    }
    return body;
  };
  const call = (
    op: Operation,
    opts: {
      token?: string;
      tenantId?: string;
      path?: Record<string, string>;
      query?: Record<string, string>;
      body?: unknown;
    },
  ): Promise<TestResponse> => {
    // A task pull answers at once rather than waiting for a task.
    const query = opts.query ?? (op.path.endsWith('/tasks/next') ? { waitMs: '0' } : {});
    const url = fillPath(op.path, opts.path ?? pathValues(op)) + queryString(query);
    const headers: Record<string, string> = {};
    if (opts.token) headers.authorization = `Bearer ${opts.token}`;
    if (opts.tenantId) headers['x-tenant-id'] = opts.tenantId;
    const body = opts.body === undefined ? bodyOf(op) : opts.body;
    return app.request(op.method.toUpperCase(), url, { headers, body });
  };
  /** Calls and expects a rejection with `status`, the envelope, and no row written anywhere. */
  const expectRejected = async (
    op: Operation,
    status: number,
    opts: Parameters<typeof call>[1],
    codes?: string[],
  ): Promise<TestResponse> => {
    const before = await snaps.counts();
    const r = await call(op, opts);
    const after = await snaps.counts();
    expect({ status: r.status, text: r.status === status ? '' : r.text.slice(0, 300) }).toEqual({ status, text: '' });
    expect(r.body?.error?.traceId).toEqual(expect.any(String));
    if (codes) expect(codes).toContain(r.body.error.code);
    expect(countDiff(before, after)).toEqual([]);
    return r;
  };
  /** B's response must carry none of A's identifiers, except those B itself sent. */
  const expectNoLeak = (r: TestResponse, sent: string) => {
    const leaked = fx.uniqueIds.filter((id) => r.text.includes(id) && !sent.includes(id));
    expect(leaked).toEqual([]);
  };

  it('covers exactly the operations of the served OpenAPI document', () => {
    expect(ROUTES.map((r) => r.label).sort()).toEqual([...ops.keys()].sort());
    expect(ROUTES.length).toBeGreaterThan(10);
  });

  it('has a fixture recipe for every path parameter of every operation, and built every fixture', () => {
    const problems: string[] = [];
    for (const r of ROUTES) {
      if (r.spec.access === 'public') continue;
      const { unresolved, unbuilt } = resolvePathParams(r.path, fx);
      for (const k of unresolved)
        problems.push(`${r.label}: no fixture recipe for ${k} (add one in test/support/fixtures)`);
      for (const k of unbuilt) problems.push(`${r.label}: fixture not built: ${k}`);
    }
    expect(problems).toEqual([]);
  });

  it("sees tenant A's fixture rows in the snapshots (the no-write checks can fail)", async () => {
    const counts = await snaps.counts();
    const digest = await snaps.tenantDigest(A);
    expect(counts.dag_version).toBeGreaterThan(0);
    expect(digest.dag_version).toMatch(/^[1-9]\d*:/);
    expect(Object.keys(digest)).toEqual(expect.arrayContaining(['tenant', 'api_token', 'dag_version']));
  });

  for (const r of ROUTES) {
    const L = r.label;
    if (r.spec.access === 'public') {
      // Sign-in and the session read take their credential themselves (a token in the body, the
      // console's cookie): 401 without a valid one.
      const ownCredential = r.spec.operationId === 'openSession' || r.spec.operationId === 'getSession';
      it(`${L} answers without a token (public)`, async () => {
        const res = await call(opOf(r), {});
        expect(res.status).toBeLessThan(500);
        if (ownCredential) expect(res.status).toBe(401);
        else expect(res.status).not.toBe(401);
      });
      continue;
    }
    const platform = r.spec.access === 'platform:admin';

    it(`${L} rejects a request without a token with 401`, async () => {
      await expectRejected(opOf(r), 401, { tenantId: platform ? undefined : A }, ['UNAUTHENTICATED']);
    });

    it(`${L} rejects an expired token with 401`, async () => {
      await expectRejected(
        opOf(r),
        401,
        { token: platform ? tokens.expiredPlatform : tokens.expiredTenant, tenantId: platform ? undefined : A },
        ['TOKEN_EXPIRED'],
      );
    });

    if (platform) {
      it(`${L} rejects a tenant admin token with 403`, async () => {
        await expectRejected(opOf(r), 403, { token: tokens.a['orchestrator:admin'], tenantId: A }, [
          'INSUFFICIENT_SCOPE',
        ]);
      });
      it(`${L} rejects tenant B's admin token naming tenant A with 403`, async () => {
        await expectRejected(opOf(r), 403, { token: tokens.b['orchestrator:admin'], tenantId: A });
      });
      continue;
    }

    it(`${L} rejects tenant B's token for tenant A with 403`, async () => {
      await expectRejected(opOf(r), 403, { token: adminOf(r, 'b'), tenantId: A }, ['TENANT_MISMATCH']);
    });

    if (r.spec.access === 'worker')
      it(`${L} rejects tenant A's admin token (needs a worker token) with 403`, async () => {
        await expectRejected(opOf(r), 403, { token: tokens.a['orchestrator:admin'], tenantId: A }, [
          'INSUFFICIENT_SCOPE',
        ]);
      });
    else
      it(`${L} rejects tenant A's worker token with 403`, async () => {
        await expectRejected(opOf(r), 403, { token: tokens.workerA, tenantId: A }, ['INSUFFICIENT_SCOPE']);
      });

    for (const scope of lacking(r.spec.access)) {
      it(`${L} rejects a ${scope} token (needs ${r.spec.access}) with 403`, async () => {
        await expectRejected(opOf(r), 403, { token: tokens.a[scope], tenantId: A }, ['INSUFFICIENT_SCOPE']);
      });
    }

    it(`${L} rejects a platform token with 403`, async () => {
      await expectRejected(opOf(r), 403, { token: app.platformToken, tenantId: A }, ['INSUFFICIENT_SCOPE']);
    });

    const pathKeys = recipeKeysOf(r.path);
    if (pathKeys.length > 0 && isTenantRoute(r)) {
      const upsert = r.method === 'put';
      if (r.method === 'get') {
        it(`${L} answers tenant A's own read token with 2xx for A's ${resourceOf(r)} (control)`, async () => {
          const op = opOf(r);
          const { unbuilt } = resolvePathParams(op.path, fx);
          expect(unbuilt).toEqual([]);
          const res = await call(op, {
            token: r.spec.access === 'worker' ? tokens.workerA : tokens.a['orchestrator:read'],
            tenantId: A,
          });
          expect({ status: res.status, text: res.status < 300 ? '' : res.text.slice(0, 300) }).toEqual({
            status: expect.any(Number),
            text: '',
          });
          expect(res.status).toBeGreaterThanOrEqual(200);
          expect(res.status).toBeLessThan(300);
        });
      }
      const name = upsert
        ? `${L} under tenant B's token with tenant A's ${resourceOf(r)} name leaves A's ${resourceOf(r)} untouched`
        : `${L} rejects tenant B's token for tenant A's ${resourceOf(r)} with 404`;
      it(name, async () => {
        const op = opOf(r);
        const { values, unbuilt } = resolvePathParams(op.path, fx);
        if (unbuilt.length) throw new Error(`no fixture for ${unbuilt.join(', ')}: cannot check cross-tenant access`);
        const asB = { token: adminOf(r, 'b'), tenantId: B };
        const digest = await snaps.tenantDigest(A);
        const before = await snaps.counts();
        const res = await call(op, { ...asB, path: values });
        const after = await snaps.counts();
        expect(await snaps.tenantDigest(A)).toEqual(digest);
        expectNoLeak(res, JSON.stringify(values));
        // The same call with ids no tenant has answers alike: A's ids reveal nothing.
        const unknown = Object.fromEntries(Object.entries(values).map(([k, v]) => [k, fresh(v)]));
        const control = await call(op, { ...asB, path: unknown });
        if (upsert) {
          expect([res.status, control.status].every((s) => s === 404 || (s >= 200 && s < 300))).toBe(true);
          expect(res.status === 404 ? 404 : 'created').toEqual(control.status === 404 ? 404 : 'created');
        } else {
          expect({ status: res.status, text: res.status === 404 ? '' : res.text.slice(0, 300) }).toEqual({
            status: 404,
            text: '',
          });
          expect(countDiff(before, after)).toEqual([]);
          expect({ status: control.status, code: control.body?.error?.code }).toEqual({
            status: 404,
            code: res.body?.error?.code,
          });
        }
      });
    }

    const queryIds = shapeKeys(r.spec.query).filter(
      (q) => QUERY_RECIPES[`${collectionOf(r.path)}?${q}`] !== undefined || ID_PROPERTIES[q] !== undefined,
    );
    for (const q of queryIds) {
      it(`${L} with tenant A's ${q} as a filter under tenant B's token returns none of A's data`, async () => {
        const op = opOf(r);
        const v = queryFixture(op.path, q, fx);
        if (v === undefined) throw new Error(`no fixture for the ${q} filter`);
        const asB = { token: tokens.b['orchestrator:admin'], tenantId: B };
        const { values } = resolvePathParams(op.path, fx);
        const res = await call(op, { ...asB, path: values, query: { [q]: v } });
        const control = await call(op, { ...asB, path: values, query: { [q]: fresh(v) } });
        expect(res.status).toBeLessThan(500);
        expectNoLeak(res, v);
        expect({
          status: res.status,
          code: res.body?.error?.code,
          items: (res.body?.items as unknown[])?.length,
        }).toEqual({
          status: control.status,
          code: control.body?.error?.code,
          items: (control.body?.items as unknown[])?.length,
        });
        // A's own call with the same filter finds A's data, so the filter reaches real rows.
        const mine = await call(op, {
          token: tokens.a['orchestrator:admin'],
          tenantId: A,
          path: values,
          query: { [q]: v },
        });
        expect(mine.status).toBeLessThan(300);
        if (Array.isArray(mine.body?.items)) expect((mine.body.items as unknown[]).length).toBeGreaterThan(0);
        else expect(fx.uniqueIds.filter((id) => id !== v && mine.text.includes(id))).not.toEqual([]);
      });
    }

    const bodyIds = shapeKeys(r.spec.body).filter((k) => ID_PROPERTIES[k] !== undefined && k !== 'version');
    if (bodyIds.length > 0 && recipeKeysOf(r.path).length === 0) {
      it(`${L} with tenant A's ${bodyIds.join(', ')} in the body under tenant B's token answers as for an unknown id`, async () => {
        const op = opOf(r);
        const asB = { token: tokens.b['orchestrator:admin'], tenantId: B };
        const body = bodyOf(op) as Record<string, unknown>;
        const unknownIds: TenantFixtures = {
          ...fx,
          values: Object.fromEntries(Object.entries(fx.values).map(([k, v]) => [k, fresh(v)])),
        };
        const digest = await snaps.tenantDigest(A);
        const res = await call(op, { ...asB, path: {}, body });
        expect(await snaps.tenantDigest(A)).toEqual(digest);
        expect(res.status).toBeLessThan(500);
        expectNoLeak(res, JSON.stringify(body));
        const control = await call(op, { ...asB, path: {}, body: bodyOf(op, unknownIds) });
        expect({ status: res.status, code: res.body?.error?.code }).toEqual({
          status: control.status,
          code: control.body?.error?.code,
        });
        // The body is otherwise valid: the answer is about the id, not a validation failure.
        expect(res.body?.error?.code).not.toBe('VALIDATION_FAILED');
      });
    }
  }

  it("rejects tenant B's token under every spelling of tenant A's id in X-Tenant-Id on every tenant operation", async () => {
    const spellings = [
      A.toUpperCase(),
      ` ${A}`,
      `${A} `,
      `${A}\t`,
      `${B}, ${A}`,
      `${A}, ${B}`,
      `${A}%00`,
      encodeURIComponent(A),
      `${A}.`,
      'tenant\u2011alpha',
    ];
    const before = await snaps.counts();
    const wrong: string[] = [];
    for (const r of ROUTES.filter(isTenantRoute)) {
      for (const tenant of spellings) {
        const viaHeader = await app
          .request(r.method.toUpperCase(), fillPath(r.path, pathValues(opOf(r))), {
            headers: {
              authorization: `Bearer ${tokens.b['orchestrator:admin']}`,
              'x-tenant-id': Buffer.from(tenant, 'utf8').toString('latin1'),
            },
            body: bodyOf(opOf(r)),
          })
          .catch((e: Error) => ({ status: 0, text: e.message }));
        // Status 0: the HTTP client itself refused to send the header value.
        if (![400, 403].includes(viaHeader.status) && viaHeader.status !== 0)
          wrong.push(
            `${r.label} X-Tenant-Id ${JSON.stringify(tenant)}: ${viaHeader.status} ${viaHeader.text.slice(0, 100)}`,
          );
      }
    }
    expect(wrong).toEqual([]);
    expect(countDiff(before, await snaps.counts())).toEqual([]);
  });

  describe('token forgeries on every authenticated operation', () => {
    const b64 = (v: unknown) => Buffer.from(JSON.stringify(v)).toString('base64url');
    const claimsOf = (t: string) => JSON.parse(Buffer.from(t.split('.')[1], 'base64url').toString()) as JWTPayload;
    /**
     * Each forgery starts from a genuine token of the kind the route takes (tenant admin, or
     * platform), so the only thing wrong with it is the forgery itself.
     */
    const forgeries: [string, (base: string) => Promise<string>, { tenantOnly?: boolean }?][] = [
      ['an unsigned alg "none" token', async (t) => `${b64({ alg: 'none', typ: 'JWT' })}.${b64(claimsOf(t))}.`],
      [
        'an HS256 token keyed with the instance public key',
        async (t) => {
          const keys = app.ordo.app.get(SigningKeys);
          return new SignJWT(claimsOf(t))
            .setProtectedHeader({ alg: 'HS256', kid: keys.active.kid, typ: 'JWT' })
            .sign(new TextEncoder().encode(await exportSPKI(keys.active.publicKey)));
        },
      ],
      ...(['secret', 'password', '', 'ordo', 'changeme'] as const).map(
        (secret): [string, (base: string) => Promise<string>] => [
          `an HS256 token re-signed with the weak secret "${secret}"`,
          async (t) => {
            const [h, p] = t.split('.');
            const header = { ...(JSON.parse(Buffer.from(h, 'base64url').toString()) as object), alg: 'HS256' };
            const signingInput = `${b64(header)}.${p}`;
            return `${signingInput}.${createHmac('sha256', secret).update(signingInput).digest('base64url')}`;
          },
        ],
      ),
      ['a token naming an unknown kid', (t) => signOwn(claimsOf(t), { kid: 'Z'.repeat(43) })],
      ['a token with an injected kid', (t) => signOwn(claimsOf(t), { kid: "../../keys/signing-keys.json' or '1'='1" })],
      [
        'a token that is not yet valid (nbf in the future)',
        (t) => signOwn({ ...claimsOf(t), nbf: Math.floor(Date.now() / 1000) + 3600 }),
      ],
      ['a token of a wrong issuer', (t) => signOwn({ ...claimsOf(t), iss: 'evil' })],
      ['a token for a wrong audience', (t) => signOwn({ ...claimsOf(t), aud: 'other-api' })],
      ['a truncated token', async (t) => t.slice(0, -12)],
      ['a token without its signature', async (t) => t.split('.').slice(0, 2).join('.') + '.'],
      ['a correctly signed token with an unrecorded jti', (t) => signOwn({ ...claimsOf(t), jti: randomUUID() })],
      [
        'a correctly signed platform token claiming a tenant',
        () => signOwn({ ...claimsOf(app.platformToken), tid: A, scope: 'orchestrator:admin' }),
        { tenantOnly: true },
      ],
    ];
    const signOwn = (payload: JWTPayload, header: Record<string, unknown> = {}) => {
      const keys = app.ordo.app.get(SigningKeys);
      return new SignJWT(payload)
        .setProtectedHeader({ alg: 'EdDSA', kid: keys.active.kid, typ: 'JWT', ...header })
        .sign(keys.active.privateKey);
    };

    for (const [what, forge, opts] of forgeries) {
      const scope = opts?.tenantOnly ? 'tenant' : 'authenticated';
      it(`rejects ${what} on every ${scope} operation with 401 and writes nothing`, async () => {
        const tenantToken = await forge(tokens.a['orchestrator:admin']);
        const workerToken = await forge(tokens.workerA);
        const platformToken = await forge(app.platformToken);
        const before = await snaps.counts();
        const wrong: string[] = [];
        for (const r of ROUTES) {
          if (r.spec.access === 'public') continue;
          const platform = r.spec.access === 'platform:admin';
          if (platform && opts?.tenantOnly) continue;
          const token = platform ? platformToken : r.spec.access === 'worker' ? workerToken : tenantToken;
          const res = await call(opOf(r), { token, tenantId: platform ? undefined : A });
          if (res.status !== 401) wrong.push(`${r.label}: ${res.status} ${res.text.slice(0, 120)}`);
        }
        expect(wrong).toEqual([]);
        expect(countDiff(before, await snaps.counts())).toEqual([]);
      });
    }
  });
});

describe('row-level security and grants in the catalog', () => {
  let app: TestApp;
  let owner: pg.Client;
  beforeAll(async () => {
    app = await startTestApp();
    owner = new pg.Client({ connectionString: app.testDb.ownerUrl });
    await owner.connect();
  });
  afterAll(async () => {
    await owner?.end();
    await app?.close();
  });

  it('has row-level security enabled and forced on every table with a tenant_id column, and on tenant', async () => {
    // A partition's rows are reached through its parent, whose policies apply; the partitions
    // themselves grant the application roles nothing (next test).
    const { rows } = await owner.query<{ table: string; enabled: boolean; forced: boolean }>(`
      select c.relname as table, c.relrowsecurity as enabled, c.relforcerowsecurity as forced
        from pg_class c join pg_namespace n on n.oid = c.relnamespace
       where n.nspname = 'public' and c.relkind in ('r', 'p') and not c.relispartition
         and (c.relname = 'tenant' or exists (select 1 from pg_attribute a
               where a.attrelid = c.oid and a.attname = 'tenant_id' and not a.attisdropped))
       order by 1`);
    expect(rows.map((r) => r.table)).toEqual(
      expect.arrayContaining(['tenant', 'api_token', 'dag_version', 'run_event']),
    );
    expect(rows.filter((r) => !r.enabled || !r.forced)).toEqual([]);
  });

  it('grants the application roles nothing on a partition, so no query reaches one past its parent', async () => {
    const { rows } = await owner.query<{ partition: string; role: string; privilege: string }>(`
      select c.relname as partition, r.role, p.privilege
        from pg_class c join pg_namespace n on n.oid = c.relnamespace
        cross join (values ('ordo_app'), ('ordo_system')) r(role)
        cross join (values ('SELECT'), ('INSERT'), ('UPDATE'), ('DELETE')) p(privilege)
       where n.nspname = 'public' and c.relispartition
         and has_table_privilege(r.role, c.oid, p.privilege)`);
    const partitions = await owner.query(`select 1 from pg_class where relispartition and relname like 'run_event_%'`);
    expect(partitions.rowCount).toBeGreaterThan(0);
    expect(rows).toEqual([]);
  });

  it('grants neither ordo_app nor ordo_system UPDATE, DELETE or TRUNCATE on run_event', async () => {
    const { rows } = await owner.query<{ role: string; privilege: string; allowed: boolean }>(`
        select r.role, p.privilege, has_table_privilege(r.role, 'public.run_event', p.privilege) as allowed
          from (values ('ordo_app'), ('ordo_system')) r(role)
          cross join (values ('UPDATE'), ('DELETE'), ('TRUNCATE')) p(privilege)`);
    expect(rows).toHaveLength(6);
    expect(rows.filter((r) => r.allowed)).toEqual([]);
    const grants = await owner.query<{ grantee: string; privilege_type: string }>(
      `select grantee, privilege_type from information_schema.role_table_grants
          where table_schema = 'public' and table_name = 'run_event' and grantee in ('ordo_app', 'ordo_system')`,
    );
    expect(grants.rows.map((g) => g.privilege_type)).toEqual(expect.arrayContaining(['INSERT', 'SELECT']));
    expect(grants.rows.filter((g) => ['UPDATE', 'DELETE', 'TRUNCATE'].includes(g.privilege_type))).toEqual([]);
  });
});
