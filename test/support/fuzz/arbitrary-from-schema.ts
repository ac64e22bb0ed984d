import fc from 'fast-check';
import type { JsonSchema } from './openapi-doc';

/**
 * fast-check arbitraries from the JSON Schemas of the OpenAPI document (draft 2020-12 as zod
 * emits it): `valid` draws values the schema accepts, `mutated` draws near-misses and hostile
 * values (dropped required fields, wrong types, extra and prototype keys, huge and odd unicode
 * strings, deep nesting, numbers at and past the bounds).
 */
export interface SchemaContext {
  /** Resolves `$ref`s (the OpenAPI document's components). */
  deref(schema: JsonSchema): JsonSchema;
  /** Per property name: values to draw besides generated ones (fixture ids, so requests reach deeper code). */
  overrides?: Record<string, unknown[]>;
}

const MAX_DEPTH = 6;

/**
 * Object.prototype's member names, and `prototype`. Looked up in a plain object (`table[name]`)
 * they find inherited values instead of nothing, so every user-string arbitrary draws them often.
 */
export const PROTOTYPE_KEYS: readonly string[] = [
  '__proto__',
  'constructor',
  'prototype',
  'toString',
  'toLocaleString',
  'valueOf',
  'hasOwnProperty',
  'isPrototypeOf',
  'propertyIsEnumerable',
  '__defineGetter__',
  '__defineSetter__',
  '__lookupGetter__',
  '__lookupSetter__',
];

/** A prototype member name, as it is or in the case and padding variants code may normalize away. */
export const prototypeKey: fc.Arbitrary<string> = fc.oneof(
  { weight: 6, arbitrary: fc.constantFrom(...PROTOTYPE_KEYS) },
  {
    weight: 1,
    arbitrary: fc
      .tuple(
        fc.constantFrom(...PROTOTYPE_KEYS),
        fc.constantFrom<(k: string) => string>(
          (k) => k.toUpperCase(),
          (k) => ` ${k} `,
          (k) => `@${k}`,
        ),
      )
      .map(([k, f]) => f(k)),
  },
);

/** Strings that break naive code: NUL, lone surrogates, bidi overrides, emoji, BOMs, traversal, templates. */
export const HOSTILE_STRINGS: readonly string[] = [
  '',
  ' ',
  '\u0000',
  'a\u0000b',
  '\ud800',
  '\udfff',
  'x\ud83d',
  '\ud83d\ude00\u200d\ud83d\udc68\u200d\ud83d\udc69\u200d\ud83d\udc67',
  '\u202eevil\u202c',
  'שלום עולם',
  '\ufeffbom',
  '\u200b',
  '\r\n\t\u0007\u001b[31m',
  '../../../../etc/passwd',
  '..%2f..%2f',
  "' or 1=1 --",
  '"; drop table tenant; --',
  '${{ secrets.X }}',
  '${{ steps.a.outputs.x }}',
  '{{constructor.constructor("return process")()}}',
  '__proto__',
  'constructor',
  'prototype',
  'NaN',
  'Infinity',
  '-Infinity',
  '-0',
  '1e309',
  '0x10',
  ' 1',
  '1 ',
  '9007199254740993',
  '-9223372036854775809',
  'null',
  'undefined',
  'true',
  '[]',
  '{}',
  '%00',
  '%',
  'Ａｄｍｉｎ',
  'İ',
  'ß'.repeat(64),
];

export const hostileString: fc.Arbitrary<string> = fc.oneof(
  { weight: 4, arbitrary: fc.constantFrom(...HOSTILE_STRINGS) },
  { weight: 3, arbitrary: prototypeKey },
  { weight: 2, arbitrary: fc.string({ unit: 'binary', maxLength: 40 }) },
  { weight: 1, arbitrary: fc.string({ unit: 'grapheme-composite', maxLength: 40 }) },
  {
    weight: 1,
    arbitrary: fc
      .tuple(fc.constantFrom('a', '\u0000', '😀', '\ud800', 'é'), fc.integer({ min: 1_000, max: 200_000 }))
      .map(([c, n]) => c.repeat(n)),
  },
);

/** Values nested `depth` levels deep in arrays or objects. */
export const deepValue = (depth: number, kind: 'array' | 'object' = 'array'): unknown => {
  let v: unknown = 0;
  for (let i = 0; i < depth; i++) v = kind === 'array' ? [v] : { a: v };
  return v;
};

/** An object with an own enumerable `key` (JSON.stringify writes it, even for `__proto__`). */
export function withKey(base: Record<string, unknown>, key: string, value: unknown): Record<string, unknown> {
  const out: Record<string, unknown> = { ...base };
  Object.defineProperty(out, key, { value, enumerable: true, configurable: true, writable: true });
  return out;
}

const NUMBERS_AT_EDGES = [
  0,
  -0,
  1,
  -1,
  0.5,
  2 ** 31 - 1,
  2 ** 31,
  -(2 ** 31) - 1,
  2 ** 53,
  2 ** 53 + 2,
  -(2 ** 53),
  1e308,
  -1e308,
  5e-324,
];

export const hostileValue: fc.Arbitrary<unknown> = fc.oneof(
  { weight: 3, arbitrary: hostileString },
  { weight: 2, arbitrary: fc.constantFrom<unknown>(...NUMBERS_AT_EDGES) },
  { weight: 1, arbitrary: fc.constantFrom<unknown>(null, true, false, [], {}, [null], { '': null }) },
  { weight: 1, arbitrary: fc.jsonValue({ maxDepth: 3 }) },
  { weight: 1, arbitrary: fc.integer({ min: 50, max: 1_000 }).map((d) => deepValue(d)) },
  { weight: 1, arbitrary: fc.integer({ min: 50, max: 1_000 }).map((d) => deepValue(d, 'object')) },
  {
    weight: 1,
    arbitrary: fc.constantFrom(...PROTOTYPE_KEYS).map((k) => withKey({}, k, { polluted: true })),
  },
);

function types(s: JsonSchema): string[] {
  if (Array.isArray(s.type)) return s.type as string[];
  if (typeof s.type === 'string') return [s.type];
  return [];
}

function num(v: unknown): number | undefined {
  return typeof v === 'number' ? v : undefined;
}

function stringArb(s: JsonSchema): fc.Arbitrary<string> {
  const min = num(s.minLength) ?? 0;
  const max = Math.max(min, Math.min(num(s.maxLength) ?? min + 24, min + 64));
  switch (s.format) {
    case 'uuid':
      return fc.uuid();
    case 'date-time':
      return fc
        .date({ min: new Date('2000-01-01T00:00:00Z'), max: new Date('2100-01-01T00:00:00Z'), noInvalidDate: true })
        .map((d) => d.toISOString());
    case 'email':
      return fc.emailAddress();
    default:
  }
  if (s.contentEncoding === 'base64') return fc.base64String({ maxLength: 64 });
  const fits = (x: string) => x.length >= min && x.length <= (num(s.maxLength) ?? Infinity);
  if (typeof s.pattern === 'string') {
    try {
      const re = new RegExp(s.pattern);
      return withPrototypeKeys(fc.stringMatching(re).filter(fits), (k) => fits(k) && re.test(k));
    } catch {
      // An expression stringMatching cannot generate from: plain strings of the right length.
    }
  }
  return withPrototypeKeys(fc.string({ minLength: min, maxLength: max }), fits);
}

/** `arb`, or in one case of four a prototype member name that `accepts` lets through (names, ids, keys, crons). */
function withPrototypeKeys(arb: fc.Arbitrary<string>, accepts: (k: string) => boolean): fc.Arbitrary<string> {
  const keys = PROTOTYPE_KEYS.filter(accepts);
  return keys.length === 0
    ? arb
    : fc.oneof({ weight: 3, arbitrary: arb }, { weight: 1, arbitrary: fc.constantFrom(...keys) });
}

function numberArb(s: JsonSchema, integer: boolean): fc.Arbitrary<number> {
  let min = num(s.minimum);
  let max = num(s.maximum);
  const exMin = num(s.exclusiveMinimum);
  const exMax = num(s.exclusiveMaximum);
  if (integer) {
    if (exMin !== undefined) min = Math.floor(exMin) + 1;
    if (exMax !== undefined) max = Math.ceil(exMax) - 1;
    const lo = Math.max(min ?? -1_000_000, Number.MIN_SAFE_INTEGER);
    const hi = Math.min(max ?? 1_000_000, Number.MAX_SAFE_INTEGER);
    const edges = [lo, hi].filter((x) => x >= lo && x <= hi);
    return fc.oneof(fc.integer({ min: lo, max: hi }), fc.constantFrom(...edges));
  }
  return fc.double({
    min: exMin ?? min ?? -1e9,
    max: exMax ?? max ?? 1e9,
    minExcluded: exMin !== undefined,
    maxExcluded: exMax !== undefined,
    noNaN: true,
    noDefaultInfinity: true,
  });
}

/** Values the schema accepts (as closely as the keywords used by zod's output allow). */
export function valid(schema: JsonSchema, ctx: SchemaContext, depth = 0): fc.Arbitrary<unknown> {
  const s = ctx.deref(schema);
  if ('const' in s) return fc.constant(s.const);
  if (Array.isArray(s.enum)) return fc.constantFrom(...(s.enum as unknown[]));
  for (const k of ['anyOf', 'oneOf'] as const) {
    const alts = s[k] as JsonSchema[] | undefined;
    if (Array.isArray(alts) && alts.length) return fc.oneof(...alts.map((a) => valid(a, ctx, depth + 1)));
  }
  if (Array.isArray(s.allOf) && s.allOf.length) return valid(s.allOf[0] as JsonSchema, ctx, depth + 1);
  const ts = types(s);
  if (ts.length > 1) return fc.oneof(...ts.map((t) => valid({ ...s, type: t }, ctx, depth)));
  switch (ts[0]) {
    case 'string':
      return stringArb(s);
    case 'integer':
      return numberArb(s, true);
    case 'number':
      return numberArb(s, false);
    case 'boolean':
      return fc.boolean();
    case 'null':
      return fc.constant(null);
    case 'array': {
      const items = (s.items as JsonSchema | undefined) ?? {};
      const minLength = num(s.minItems) ?? 0;
      const maxLength = Math.max(minLength, Math.min(num(s.maxItems) ?? 4, depth > 3 ? minLength : 4));
      return fc.array(valid(items, ctx, depth + 1), { minLength, maxLength });
    }
    case 'object':
      return objectArb(s, ctx, depth);
    default:
      if (s.properties) return objectArb(s, ctx, depth);
      return fc.jsonValue({ maxDepth: depth >= MAX_DEPTH ? 0 : 2 });
  }
}

function objectArb(s: JsonSchema, ctx: SchemaContext, depth: number): fc.Arbitrary<Record<string, unknown>> {
  const props = (s.properties as Record<string, JsonSchema> | undefined) ?? {};
  const required = new Set((s.required as string[] | undefined) ?? []);
  const names = Object.keys(props);
  if (names.length === 0) {
    const extra = s.additionalProperties;
    if (extra === false) return fc.constant({});
    const valueSchema = typeof extra === 'object' && extra !== null ? (extra as JsonSchema) : {};
    const keySchema = (s.propertyNames as JsonSchema | undefined) ?? { type: 'string', maxLength: 16 };
    if (depth >= MAX_DEPTH) return fc.constant({});
    // (A `__proto__` or `constructor` key may make the body one the API refuses as a whole: not valid.)
    const key = (valid(keySchema, ctx, depth + 1) as fc.Arbitrary<string>).filter(
      (k) => k !== '__proto__' && k !== 'constructor',
    );
    return fc.dictionary(key, valid(valueSchema, ctx, depth + 1), { maxKeys: 3 });
  }
  const model: Record<string, fc.Arbitrary<unknown>> = {};
  for (const name of names) {
    if (depth >= MAX_DEPTH && !required.has(name)) continue;
    const generated = valid(props[name], ctx, depth + 1);
    const fixed = ctx.overrides?.[name];
    model[name] = fixed?.length
      ? fc.oneof({ weight: 3, arbitrary: fc.constantFrom(...fixed) }, { weight: 1, arbitrary: generated })
      : generated;
  }
  return fc.record(model, { requiredKeys: names.filter((n) => required.has(n) && n in model) });
}

/** Near-misses and hostile values for `schema` (most of them invalid, some accidentally valid). */
export function mutated(schema: JsonSchema, ctx: SchemaContext): fc.Arbitrary<unknown> {
  const s = ctx.deref(schema);
  const base = valid(s, ctx);
  const props = (s.properties as Record<string, JsonSchema> | undefined) ?? {};
  const names = Object.keys(props);
  const required = (s.required as string[] | undefined) ?? [];
  const asObject = (v: unknown) =>
    v && typeof v === 'object' && !Array.isArray(v) ? (v as Record<string, unknown>) : {};
  const arbs: fc.Arbitrary<unknown>[] = [hostileValue];
  if (names.length) {
    if (required.length) {
      arbs.push(
        fc.tuple(base, fc.constantFrom(...required)).map(([v, k]) => {
          const o = { ...asObject(v) };
          delete o[k];
          return o;
        }),
      );
    }
    arbs.push(
      fc.tuple(base, fc.constantFrom(...names), hostileValue).map(([v, k, x]) => withKey(asObject(v), k, x)),
      fc
        .tuple(base, fc.constantFrom(...names), fc.constantFrom(...edgeValuesFor(props, ctx)))
        .map(([v, k, x]) => withKey(asObject(v), k, x)),
      fc
        .tuple(base, fc.oneof(prototypeKey, fc.constantFrom('extra', ''), fc.string()), hostileValue)
        .map(([v, k, x]) => withKey(asObject(v), k, x)),
    );
  } else {
    arbs.push(fc.constantFrom(...edgeValuesFor({ x: s }, ctx)));
  }
  return fc.oneof(...arbs);
}

/** Values just past (and at) each property's bounds, and of the wrong type. */
function edgeValuesFor(props: Record<string, JsonSchema>, ctx: SchemaContext): unknown[] {
  const out: unknown[] = ['NaN', '1e309', 1.5, -1, 0, null, [], {}, true, '\u0000'];
  for (const p of Object.values(props)) {
    const s = ctx.deref(p);
    for (const k of ['minimum', 'maximum', 'exclusiveMinimum', 'exclusiveMaximum'] as const) {
      const v = num(s[k]);
      if (v !== undefined) out.push(v - 1, v, v + 1, v + 0.5, String(v));
    }
    const maxLength = num(s.maxLength);
    if (maxLength !== undefined) out.push('x'.repeat(maxLength), 'x'.repeat(maxLength + 1), '😀'.repeat(maxLength));
    const maxItems = num(s.maxItems);
    if (maxItems !== undefined) out.push(Array.from({ length: maxItems + 1 }, () => 'x'));
    if (Array.isArray(s.enum))
      out.push(...(s.enum as unknown[]).map((e) => (typeof e === 'string' ? e.toUpperCase() + ' ' : e)));
  }
  return out;
}

/** One deterministic valid value (for requests that must pass validation). */
export function sample<T>(arb: fc.Arbitrary<T>, seed = 42): T {
  return fc.sample(arb, { numRuns: 1, seed })[0];
}
