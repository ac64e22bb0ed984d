import type { JsonSchema } from './protocol';

/** The part of a zod (v4) schema the SDK uses: parsing and conversion to JSON Schema. */
export interface ZodLike<T = unknown> {
  safeParse(value: unknown): { success: true; data: T } | { success: false; error: { issues: ZodIssueLike[] } };
  toJSONSchema(params?: { io?: 'input' | 'output'; unrepresentable?: 'throw' | 'any'; target?: string }): unknown;
}

interface ZodIssueLike {
  path: PropertyKey[];
  message: string;
}

/** A handler's input or output schema: a zod schema or a JSON Schema object. */
export type SchemaLike<T = unknown> = ZodLike<T> | JsonSchema;

export type Validation = { ok: true; value: unknown } | { ok: false; message: string };

export interface CompiledSchema {
  /** The JSON Schema the worker declares at registration. */
  json: JsonSchema;
  /** Checks a value; undefined when no validator is at hand (a JSON Schema without zod installed). */
  validate?: (value: unknown) => Validation;
}

export function isZodLike(s: unknown): s is ZodLike {
  return (
    s !== null &&
    typeof s === 'object' &&
    typeof (s as ZodLike).safeParse === 'function' &&
    typeof (s as ZodLike).toJSONSchema === 'function'
  );
}

function describeIssues(issues: ZodIssueLike[]): string {
  return issues
    .slice(0, 5)
    .map((i) => `${i.path.length > 0 ? i.path.map(String).join('.') : '(root)'}: ${i.message}`)
    .join('; ');
}

function zodValidator(schema: ZodLike): (value: unknown) => Validation {
  return (value) => {
    const r = schema.safeParse(value);
    return r.success ? { ok: true, value: r.data } : { ok: false, message: describeIssues(r.error.issues) };
  };
}

/**
 * A copy of a JSON value whose objects have no prototype, so a property the schema names (such as
 * `constructor`) is never found on Object.prototype. Iterative, so deep input cannot exhaust the stack.
 */
function withoutPrototypes(value: unknown): unknown {
  const copy = (v: unknown): unknown => {
    if (Array.isArray(v)) return new Array<unknown>(v.length);
    if (v !== null && typeof v === 'object') return Object.create(null) as Record<string, unknown>;
    return v;
  };
  const root = copy(value);
  const stack: [unknown, unknown][] = [[value, root]];
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

type FromJsonSchema = (schema: JsonSchema) => ZodLike;

/** zod's JSON Schema compiler when zod (an optional peer dependency) is installed. */
export async function loadJsonSchemaCompiler(): Promise<FromJsonSchema | undefined> {
  try {
    const zod = (await import('zod')) as unknown as { z?: { fromJSONSchema?: FromJsonSchema } };
    return zod.z?.fromJSONSchema;
  } catch {
    return undefined;
  }
}

/**
 * Compiles a handler schema. A zod schema validates as itself (its parsed value, with defaults, is
 * what the handler receives) and is declared as its JSON Schema; a JSON Schema is declared as given
 * and validated through `fromJsonSchema` when there is one.
 */
export function compileSchema(
  schema: SchemaLike,
  io: 'input' | 'output',
  fromJsonSchema: FromJsonSchema | undefined,
): CompiledSchema {
  if (isZodLike(schema)) {
    // Draft-07 keywords, without a `$schema`: what every JSON Schema validator takes (the server's
    // refuses a `$schema` naming draft 2020-12, zod's default).
    const { $schema: _draft, ...json } = schema.toJSONSchema({
      io,
      unrepresentable: 'any',
      target: 'draft-07',
    }) as JsonSchema;
    return { json, validate: zodValidator(schema) };
  }
  if (schema === null || typeof schema !== 'object' || Array.isArray(schema)) {
    throw new TypeError(`the ${io} schema must be a zod schema or a JSON Schema object`);
  }
  if (!fromJsonSchema) return { json: schema };
  const compiled = fromJsonSchema(schema);
  const check = zodValidator(compiled);
  return {
    json: schema,
    validate: (value) => {
      const r = check(withoutPrototypes(value));
      // The handler receives the value as it came, with ordinary objects.
      return r.ok ? { ok: true, value } : r;
    },
  };
}
