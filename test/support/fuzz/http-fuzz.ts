import fc from 'fast-check';
import { errorEnvelopeSchema } from '../../../src/core/errors/error-envelope';
import type { TenantFixtures } from '../fixtures/tenant-fixtures';
import { ID_PROPERTIES, RECIPES, queryFixture, recipeKeysOf, resolvePathParams } from '../fixtures/tenant-fixtures';
import { countDiff, type DbSnapshots } from '../fixtures/db-snapshot';
import {
  PROTOTYPE_KEYS,
  hostileString,
  hostileValue,
  mutated,
  sample,
  valid,
  withKey,
  type SchemaContext,
} from './arbitrary-from-schema';
import { deref, encodeSegment, type JsonSchema, type OpenApiDocument, type Operation } from './openapi-doc';
import { namingFixtures, runFuzz, withFixtures } from './replay';

/** Cases per operation: ORDO_FUZZ_RUNS (on demand, e.g. 1000), else a CI default. */
export const fuzzRuns = (ciDefault: number): number => {
  const n = Number(process.env.ORDO_FUZZ_RUNS);
  return Number.isInteger(n) && n > 0 ? n : ciDefault;
};

/** Longest a single request may take before it counts as a hang. */
export const REQUEST_TIMEOUT_MS = 15_000;

export interface FuzzRequest {
  path: Record<string, string>;
  query: Record<string, string>;
  /** `undefined`: no body; `{ json }`: a JSON value; `{ raw, type }`: bytes as they are. */
  body?: { json: unknown } | { raw: string | Buffer; type: string };
  /** Extra request headers (Idempotency-Key on tenant POSTs). */
  headers?: Record<string, string>;
  /** Take a row snapshot around this request (sampled, so that the run stays fast). */
  snapshot: boolean;
}

/** Idempotency keys: fresh, reused across cases (replays and 422 conflicts), malformed, too long. */
const idempotencyKey: fc.Arbitrary<string> = fc.oneof(
  fc.uuid(),
  fc.constantFrom('fuzz-key-1', 'fuzz-key-2', 'fuzz-key-3'),
  fc.constantFrom(...PROTOTYPE_KEYS),
  fc.string({ unit: 'binary-ascii', maxLength: 300 }).filter((k) => /^[\x21-\x7e]([\x20-\x7e]*[\x21-\x7e])?$/.test(k)),
  fc.constantFrom('x'.repeat(255), 'x'.repeat(256), 'a b', '"quoted"'),
);

export interface Caller {
  baseUrl: string;
  headers: Record<string, string>;
}

const fixtureValues = (op: Operation, name: string, fx: TenantFixtures): string[] => {
  const key = recipeKeysOf(op.path).find((k) => k.name === name)?.key;
  const field = (key && RECIPES[key]) ?? ID_PROPERTIES[name];
  const v = field ? fx.values[field] : undefined;
  return v === undefined ? [] : [v];
};

/** Hostile strings that fit in a URL (Node refuses request heads over 16 KiB before the app sees them). */
const shortHostile = hostileString.map((s) => (s.length > 1500 ? s.slice(0, 1500) : s));

/** Schema context with the tenant's ids and example values as property overrides. */
function schemaContext(doc: OpenApiDocument, fx: TenantFixtures): SchemaContext {
  const overrides: Record<string, unknown[]> = { plugin: ['noop'] };
  for (const [prop, field] of Object.entries(ID_PROPERTIES)) {
    const v = fx.values[field];
    if (v !== undefined) overrides[prop] = prop === 'version' ? [Number(v)] : [v];
  }
  for (const [k, v] of Object.entries(fx.examples)) overrides[k] = [v];
  return { deref: (s) => deref(s, doc), overrides };
}

/** Requests for one operation: valid ones (with the tenant's real ids), near-misses and hostile ones. */
export function requestArbitrary(
  op: Operation,
  doc: OpenApiDocument,
  fx: TenantFixtures,
  opts: { snapshotRate?: number } = {},
): fc.Arbitrary<FuzzRequest> {
  const ctx = schemaContext(doc, fx);

  const path = fc.record(
    Object.fromEntries(
      op.pathParams.map((p) => {
        const fixed = fixtureValues(op, p.name, fx);
        const generated = valid(p.schema, ctx).map(String);
        const arbs: fc.WeightedArbitrary<string>[] = [
          { weight: 2, arbitrary: generated },
          { weight: 1, arbitrary: shortHostile },
        ];
        if (fixed.length) arbs.push({ weight: 4, arbitrary: fc.constantFrom(...fixed) });
        return [p.name, fc.oneof(...arbs)];
      }),
    ),
  ) as fc.Arbitrary<Record<string, string>>;

  const queryModel: Record<string, fc.Arbitrary<string | undefined>> = {};
  for (const p of op.queryParams) {
    const fixed = queryFixture(op.path, p.name, fx);
    const arbs: fc.WeightedArbitrary<string>[] = [
      { weight: 3, arbitrary: valid(p.schema, ctx).map(String) },
      { weight: 1, arbitrary: shortHostile },
    ];
    if (fixed !== undefined) arbs.push({ weight: 2, arbitrary: fc.constant(fixed) });
    queryModel[p.name] = p.required ? fc.oneof(...arbs) : fc.option(fc.oneof(...arbs), { nil: undefined, freq: 2 });
  }
  const query = fc
    .tuple(
      fc.record(queryModel),
      // An unknown query parameter in about one request in eight.
      fc.oneof(
        { weight: 7, arbitrary: fc.constant(undefined) },
        {
          weight: 1,
          arbitrary: fc.tuple(fc.constantFrom('extra', 'limit[]', ...PROTOTYPE_KEYS), shortHostile),
        },
      ),
    )
    .map(([q, extra]) => {
      const out: Record<string, string> = {};
      for (const [k, v] of Object.entries(q)) if (v !== undefined) out[k] = v;
      if (extra) Object.defineProperty(out, extra[0], { value: extra[1], enumerable: true });
      return out;
    });

  let body: fc.Arbitrary<FuzzRequest['body']>;
  if (op.bodySchema) {
    const schema = deref(op.bodySchema, doc);
    const names = Object.keys((schema.properties as Record<string, unknown> | undefined) ?? {});
    body = fc.oneof(
      { weight: 4, arbitrary: valid(schema, ctx).map((json) => ({ json })) },
      { weight: 6, arbitrary: mutated(schema, ctx).map((json) => ({ json })) },
      { weight: 1, arbitrary: deepBody(names.length ? names : ['x']) },
    );
  } else if (op.method === 'get' || op.method === 'delete') {
    body = fc.constant(undefined);
  } else {
    body = fc.oneof(
      { weight: 4, arbitrary: fc.constant(undefined) },
      { weight: 1, arbitrary: hostileValue.map((json) => ({ json })) },
    );
  }
  const rate = opts.snapshotRate ?? 0.3;
  const tenantPost = op.method === 'post' && op.access !== 'public' && op.access !== 'platform:admin';
  const headers: fc.Arbitrary<Record<string, string>> = tenantPost
    ? fc.oneof(
        { weight: 4, arbitrary: fc.constant({}) },
        { weight: 1, arbitrary: idempotencyKey.map((k) => ({ 'idempotency-key': k })) },
      )
    : fc.constant({});
  return fc.record({
    path,
    query,
    body,
    headers,
    snapshot: fc.double({ min: 0, max: 1, noNaN: true }).map((x) => x < rate),
  });
}

/**
 * A JSON text nested up to 100k levels under one property: written as text, since building such
 * values as objects overflows the test's own stack in JSON.stringify.
 */
const deepBody = (names: string[]): fc.Arbitrary<FuzzRequest['body']> =>
  fc
    .tuple(fc.constantFrom(...names), fc.integer({ min: 1_000, max: 100_000 }), fc.constantFrom('[]', '{"a":}'))
    .map(([name, depth, shape]) => {
      const [open, close] = shape === '[]' ? ['[', ']'] : ['{"a":', '}'];
      return {
        raw: `{${JSON.stringify(name)}:${open.repeat(depth)}1${close.repeat(depth)}}`,
        type: 'application/json',
      };
    });

export function urlOf(op: Operation, req: FuzzRequest): string {
  const p = op.path.replace(/\{([^}]+)\}/g, (_m, name: string) => encodeSegment(req.path[name] ?? ''));
  const q = Object.keys(req.query)
    .map((k) => `${encodeSegment(k)}=${encodeSegment(req.query[k])}`)
    .join('&');
  return q ? `${p}?${q}` : p;
}

/** Serializes a JSON value; a lone surrogate is written as its escape, as JSON.stringify does. */
export function bodyText(req: FuzzRequest): { text: string | Buffer; type: string } | undefined {
  if (!req.body) return undefined;
  if ('raw' in req.body) return { text: req.body.raw, type: req.body.type };
  return { text: JSON.stringify(req.body.json) ?? 'null', type: 'application/json' };
}

export interface Outcome {
  status: number;
  text: string;
  body: unknown;
  contentType: string;
}

/** Sends one request with a hang timeout; a timeout is a failure that names the request. */
export async function send(caller: Caller, op: Operation, req: FuzzRequest): Promise<Outcome> {
  const b = bodyText(req);
  const headers: Record<string, string> = { ...caller.headers, ...(req.headers ?? {}) };
  if (b) headers['content-type'] = b.type;
  const url = caller.baseUrl + urlOf(op, req);
  let res: Response;
  try {
    res = await fetch(url, {
      method: op.method.toUpperCase(),
      headers,
      body: b?.text,
      signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
    });
  } catch (e) {
    throw new Error(`${describe(op, req)}\n  no answer: ${(e as Error).message}`);
  }
  const text = await res.text();
  let body: unknown;
  try {
    body = text ? JSON.parse(text) : undefined;
  } catch {
    body = undefined;
  }
  return { status: res.status, text, body, contentType: res.headers.get('content-type') ?? '' };
}

export function describe(op: Operation, req: FuzzRequest): string {
  const b = bodyText(req);
  const shown = b ? (typeof b.text === 'string' ? b.text : `<${b.text.length} bytes>`) : '';
  const h =
    req.headers?.['idempotency-key'] !== undefined ? ` [Idempotency-Key: ${req.headers['idempotency-key']}]` : '';
  return `${op.method.toUpperCase()} ${urlOf(op, req).slice(0, 500)}${h}${b ? ` (${b.type}) ${shown.slice(0, 600)}${shown.length > 600 ? `… (${shown.length} chars)` : ''}` : ''}`;
}

/**
 * The properties every answer must have: no 5xx; a 2xx status the route documents, with a body
 * matching its documented schema; an error in the envelope; and, on a 4xx, no row written.
 */
export async function checkOutcome(
  op: Operation,
  req: FuzzRequest,
  out: Outcome,
  snapshots: { before?: Record<string, number>; after?: () => Promise<Record<string, number>> },
): Promise<void> {
  const fail = (why: string) => {
    throw new Error(`${describe(op, req)}\n  → ${out.status} ${out.text.slice(0, 500)}\n  ${why}`);
  };
  // A 5xx is a failure unless the route documents it (readiness answers 503 while a migration is pending).
  const documented5xx = out.status >= 500 && op.route.spec.responses[out.status] !== undefined;
  if (out.status >= 500 && !documented5xx) fail('server error');
  if ((out.status >= 200 && out.status < 300) || documented5xx) {
    const documented = op.route.spec.responses[out.status];
    if (!documented) fail(`status ${out.status} is not documented for this operation`);
    if (documented.schema && out.contentType.includes('json')) {
      const r = documented.schema.safeParse(out.body);
      if (!r.success) fail(`body does not match the documented ${out.status} schema: ${r.error.message.slice(0, 500)}`);
    }
  } else if (out.status >= 400) {
    const r = errorEnvelopeSchema.safeParse(out.body);
    if (!r.success) fail('error body is not the error envelope');
    if (snapshots.before && snapshots.after) {
      // With an Idempotency-Key, a handler's 4xx is stored for replay (IETF draft): that one row is expected.
      // Spans are telemetry flushed in the background by the span store, possibly from earlier requests.
      const keyed = req.headers?.['idempotency-key'] !== undefined;
      const diff = countDiff(snapshots.before, await snapshots.after()).filter(
        (d) => !(keyed && d.startsWith('idempotency_key:')) && !d.startsWith('span:'),
      );
      if (diff.length) fail(`rejected, yet rows were written: ${diff.join(', ')}`);
    }
  }
}

/**
 * Runs one operation's corpus entries, `examples` and `runs` generated requests, and checks each
 * answer. Corpus inputs are requests whose strings may name fixtures (`{{fixture.dagId}}`).
 */
export async function fuzzOperation(
  caller: Caller,
  op: Operation,
  arb: fc.Arbitrary<FuzzRequest>,
  snaps: DbSnapshots,
  runs: number,
  opts: { fx: TenantFixtures; examples?: FuzzRequest[] },
): Promise<void> {
  await runFuzz({
    fuzzer: 'operations',
    test: op.label,
    arbitrary: arb,
    runs,
    examples: opts.examples,
    fromCorpus: (input) => {
      const r = withFixtures(input, opts.fx.values) as Partial<FuzzRequest>;
      return { path: r.path ?? {}, query: r.query ?? {}, body: r.body, headers: r.headers ?? {}, snapshot: true };
    },
    toCorpus: ({ snapshot: _snapshot, ...req }) => namingFixtures(req, opts.fx.values),
    check: async (req) => {
      const before = req.snapshot ? await snaps.counts() : undefined;
      const out = await send(caller, op, req);
      await checkOutcome(op, req, out, { before, after: () => snaps.counts() });
    },
  });
}

/**
 * Requests that put `constructor` (a function on every object) and `__proto__` (an object) into
 * each string slot of an otherwise valid request, one slot at a time: path and query parameters
 * and the body's string properties. Code that looks a caller's string up in a plain object finds
 * something for these two whatever the object, so every such lookup on a reachable path is hit.
 */
export function prototypeExamples(op: Operation, doc: OpenApiDocument, fx: TenantFixtures): FuzzRequest[] {
  const ctx = schemaContext(doc, fx);
  const path: Record<string, string> = {};
  for (const p of op.pathParams) path[p.name] = 'x';
  Object.assign(path, resolvePathParams(op.path, fx).values);
  const query: Record<string, string> = {};
  for (const p of op.queryParams) {
    if (!p.required) continue;
    const example = fx.examples[p.name];
    query[p.name] =
      queryFixture(op.path, p.name, fx) ??
      (typeof example === 'string' ? example : String(sample(valid(p.schema, ctx))));
  }
  const body = sampleBody(op, doc, fx);
  const base: FuzzRequest = {
    path,
    query,
    body: body === undefined ? undefined : { json: body },
    headers: {},
    snapshot: true,
  };
  const out: FuzzRequest[] = [];
  for (const key of ['constructor', '__proto__']) {
    for (const p of op.pathParams) out.push({ ...base, path: { ...path, [p.name]: key } });
    for (const p of op.queryParams) out.push({ ...base, query: { ...query, [p.name]: key } });
    if (body !== null && typeof body === 'object' && !Array.isArray(body)) {
      for (const [name, v] of Object.entries(body)) {
        if (typeof v === 'string')
          out.push({ ...base, body: { json: withKey(body as Record<string, unknown>, name, key) } });
      }
    }
  }
  return out;
}

/** A body that passes schema validation where generation allows, with the tenant's ids and example values. */
export function sampleBody(op: Operation, doc: OpenApiDocument, fx: TenantFixtures, seed = 7): unknown {
  if (!op.bodySchema) return undefined;
  const s = deref(op.bodySchema, doc);
  const body = fc.sample(valid(s, { deref: (x) => deref(x, doc), overrides: { plugin: ['noop'] } }), {
    numRuns: 1,
    seed,
  })[0];
  if (body && typeof body === 'object' && !Array.isArray(body)) {
    const props = (s.properties as Record<string, JsonSchema> | undefined) ?? {};
    const out = body as Record<string, unknown>;
    for (const [k, v] of Object.entries(fx.examples)) if (k in props) out[k] = v;
    for (const [k, field] of Object.entries(ID_PROPERTIES)) {
      const v = fx.values[field];
      if (!(k in props) || v === undefined) continue;
      out[k] = JSON.stringify(deref(props[k], doc)).includes('"integer"') ? Number(v) : v;
    }
  }
  return body;
}
