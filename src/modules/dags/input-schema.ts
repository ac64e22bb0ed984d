import safeRegex from 'safe-regex2';
import { z } from 'zod';
import { badRequest } from '../../core/errors/domain-error';

const TYPE_NAMES = ['string', 'number', 'integer', 'boolean', 'object', 'array', 'null'] as const;
const count = z.number().int().min(0);

function validRegex(p: string): boolean {
  try {
    new RegExp(p, 'u');
    return true;
  } catch {
    return false;
  }
}

/**
 * Run inputs are checked against the schema's patterns by JavaScript's backtracking engine, on the
 * api process's one thread: a pattern with nested quantifiers (`^(a+)+$`, star height above one)
 * can take exponential time on a crafted value and hold every tenant's requests. Such patterns
 * are refused at publish (safe-regex2's star-height check).
 */
function boundedRegex(p: string): boolean {
  return !validRegex(p) || safeRegex(p);
}
const patternString = z
  .string()
  .refine(validRegex, 'not a valid regular expression')
  .refine(boundedRegex, 'a pattern with nested quantifiers (such as (a+)+) may take exponential time: not supported');

/**
 * The shape of the JSON Schema subset DAG inputs may use (draft 2020-12 keywords with their value
 * types). It catches mistakes the compiler would silently ignore, such as `required: "a"`.
 */
const jsonSchemaShape: z.ZodType = z.lazy(() =>
  z.union([
    z.boolean(),
    z.looseObject({
      $schema: z.string().optional(),
      $id: z.string().optional(),
      $ref: z.string().optional(),
      $defs: z.record(z.string(), jsonSchemaShape).optional(),
      title: z.string().optional(),
      description: z.string().optional(),
      type: z.union([z.enum(TYPE_NAMES), z.array(z.enum(TYPE_NAMES)).min(1)]).optional(),
      properties: z.record(z.string(), jsonSchemaShape).optional(),
      patternProperties: z.record(patternString, jsonSchemaShape).optional(),
      additionalProperties: jsonSchemaShape.optional(),
      required: z.array(z.string()).optional(),
      items: jsonSchemaShape.optional(),
      prefixItems: z.array(jsonSchemaShape).optional(),
      enum: z.array(z.unknown()).min(1).optional(),
      allOf: z.array(jsonSchemaShape).min(1).optional(),
      anyOf: z.array(jsonSchemaShape).min(1).optional(),
      oneOf: z.array(jsonSchemaShape).min(1).optional(),
      not: jsonSchemaShape.optional(),
      minLength: count.optional(),
      maxLength: count.optional(),
      minItems: count.optional(),
      maxItems: count.optional(),
      minProperties: count.optional(),
      maxProperties: count.optional(),
      uniqueItems: z.boolean().optional(),
      minimum: z.number().optional(),
      maximum: z.number().optional(),
      exclusiveMinimum: z.number().optional(),
      exclusiveMaximum: z.number().optional(),
      multipleOf: z.number().positive().optional(),
      pattern: patternString.optional(),
      format: z.string().optional(),
    }),
  ]),
);

/** Every `$ref` string inside `v`, not descending into nested `$defs` (they are nodes of their own). */
function refsIn(v: unknown, top = true): string[] {
  const out: string[] = [];
  const stack: unknown[] = [v];
  while (stack.length > 0) {
    const x = stack.pop();
    if (Array.isArray(x)) stack.push(...(x as unknown[]));
    else if (x !== null && typeof x === 'object') {
      for (const [k, y] of Object.entries(x)) {
        if (k === '$ref' && typeof y === 'string') out.push(y);
        else if (!(top && x === v && k === '$defs')) stack.push(y);
      }
    }
  }
  return out;
}

/**
 * A reference cycle among the root (`#`) and its `$defs` (`#/$defs/x` → … → `#/$defs/x`), as the
 * list of references on it. Run inputs are plain JSON objects, so recursive schemas are refused
 * at publish: validating against them recurses without bound.
 */
function refCycle(schema: Record<string, unknown>): string[] | undefined {
  const defs = (schema.$defs ?? {}) as Record<string, unknown>;
  const edges = new Map<string, string[]>([['#', refsIn(schema)]]);
  for (const [name, def] of Object.entries(defs)) edges.set(`#/$defs/${name}`, refsIn(def, false));
  const state = new Map<string, 'open' | 'done'>();
  const path: string[] = [];
  const visit = (node: string): string[] | undefined => {
    if (state.get(node) === 'open') return [...path.slice(path.indexOf(node)), node];
    if (state.get(node) === 'done' || !edges.has(node)) return undefined;
    state.set(node, 'open');
    path.push(node);
    for (const next of edges.get(node)!) {
      const found = visit(next);
      if (found) return found;
    }
    path.pop();
    state.set(node, 'done');
    return undefined;
  };
  for (const node of edges.keys()) {
    const found = visit(node);
    if (found) return found;
  }
  return undefined;
}

/** Run inputs of a DAG that declares no input schema: any JSON object. */
const anyInputs = z.record(z.string(), z.unknown());

/**
 * A copy of a JSON value whose objects have no prototype. zod reads each property a schema names
 * with `input[key]`, so on plain objects a declared `constructor` or `toString` would find the
 * inherited function: a required one would be satisfied by `{}`, an optional one refused. Copies
 * iteratively, so deep input cannot exhaust the stack.
 */
function withoutPrototypes(value: unknown): unknown {
  const copy = (v: unknown): unknown => {
    if (Array.isArray(v)) return new Array<unknown>(v.length);
    if (v !== null && typeof v === 'object') return Object.create(null) as Record<string, unknown>;
    return v;
  };
  const root = copy(value);
  const stack: [from: unknown, to: unknown][] = [[value, root]];
  while (stack.length > 0) {
    const [from, to] = stack.pop()!;
    if (from === null || typeof from !== 'object') continue;
    for (const [k, v] of Object.entries(from)) {
      const c = copy(v);
      (to as Record<string, unknown>)[k] = c;
      stack.push([v, c]);
    }
  }
  return root;
}

/**
 * The issue that says what is wrong: within a union (a schema is a boolean or an object), the
 * deepest of its branches' issues, and within a record's key its own, with their full paths,
 * rather than "Invalid input" or "Invalid key in record".
 */
function deepest(issue: z.core.$ZodIssue): { path: PropertyKey[]; message: string } {
  const inner = issue.code === 'invalid_union' ? issue.errors.flat() : issue.code === 'invalid_key' ? issue.issues : [];
  let best: { path: PropertyKey[]; message: string } = issue;
  for (const i of inner) {
    const d = deepest(i);
    const found = { path: [...issue.path, ...d.path], message: d.message };
    if (best === issue || found.path.length > best.path.length) best = found;
  }
  return best;
}

/**
 * Compiles a DAG's declared input JSON Schema into a zod schema that validates run inputs (the same
 * compilation checks the schema at publish). With no schema, any JSON object is accepted. Throws a
 * 400 INPUT_SCHEMA_INVALID naming the problem when `json` is not a usable JSON Schema.
 */
export function compileInputSchema(json: unknown): z.ZodType {
  if (json === undefined || json === null) return anyInputs;
  const shape = jsonSchemaShape.safeParse(json);
  if (!shape.success) {
    const i = deepest(shape.error.issues[0]);
    const where = i.path.length > 0 ? i.path.map(String).join('.') : '(root)';
    throw badRequest('INPUT_SCHEMA_INVALID', `inputs schema ${where}: ${i.message}`, { path: i.path.map(String) });
  }
  if (typeof json !== 'object' || Array.isArray(json)) {
    throw badRequest('INPUT_SCHEMA_INVALID', 'inputs schema must be a JSON Schema object');
  }
  const cycle = refCycle(json as Record<string, unknown>);
  if (cycle) {
    throw badRequest('INPUT_SCHEMA_INVALID', `inputs schema: recursive $ref (${cycle.join(' → ')}) is not supported`);
  }
  const t = (json as { type?: unknown }).type;
  if (t !== undefined && t !== 'object') {
    throw badRequest('INPUT_SCHEMA_INVALID', 'inputs schema type must be "object": run inputs are a JSON object');
  }
  try {
    // Run inputs are always a JSON object, whatever the declared schema says about other types.
    const compiled = z.fromJSONSchema(json as Parameters<typeof z.fromJSONSchema>[0]);
    return anyInputs.pipe(z.preprocess(withoutPrototypes, compiled) as z.ZodType<unknown, Record<string, unknown>>);
  } catch (e) {
    throw badRequest('INPUT_SCHEMA_INVALID', `inputs schema: ${(e as Error).message}`);
  }
}
