import Ajv, { type Options, type ValidateFunction } from 'ajv';
import type { RegExpEngine } from 'ajv/dist/types';
import Ajv2019 from 'ajv/dist/2019';
import Ajv2020 from 'ajv/dist/2020';
import { RE2 } from 're2-wasm';
import addFormats from 'ajv-formats';
import type { JsonObject } from '../plugins/plugin';

/** The largest schema a worker may declare (as JSON). */
export const MAX_SCHEMA_BYTES = 64 * 1024;
/** Compiled validators kept per process (by schema text). */
const MAX_CACHED = 2_000;

/** A schema a worker declared that cannot be used: where and why. */
export class SchemaError extends Error {}

/**
 * The schemas' `pattern`s and `patternProperties` run on RE2, in time linear in the text: a
 * pattern a worker declares (`^(a+)+$`) cannot hold the process's one thread for seconds on a
 * value that makes a backtracking engine explode. RE2 has no backreferences or lookaround: a
 * schema that uses them is refused at registration.
 */
const linearRegExp: RegExpEngine = Object.assign(
  (pattern: string, flags: string) => new RE2(pattern, flags.includes('u') ? flags : `${flags}u`),
  { code: 're2-wasm' },
);
const AJV_OPTIONS: Options = { allErrors: false, strict: false, validateSchema: true, code: { regExp: linearRegExp } };

/**
 * The JSON Schemas workers declare for their task types' inputs and outputs, compiled with Ajv
 * (draft-07, or draft 2019-09 or 2020-12 when its $schema says so; standard formats) and cached by
 * their text: a worker's schemas are checked once at registration, and each result is validated
 * without compiling again.
 */
export class TaskSchemas {
  private readonly draft07 = new Ajv(AJV_OPTIONS);
  private readonly draft2019 = new Ajv2019(AJV_OPTIONS);
  private readonly draft2020 = new Ajv2020(AJV_OPTIONS);
  private readonly cache = new Map<string, ValidateFunction>();

  constructor() {
    addFormats(this.draft07);
    addFormats(this.draft2019);
    addFormats(this.draft2020);
  }

  /** Compiles `schema` (throws SchemaError naming `where` when it is too large or not a schema). */
  check(where: string, schema: JsonObject): void {
    this.validator(where, schema);
  }

  /** Null when `value` matches `schema`, else the first mismatch (`/path: message`). */
  mismatch(schema: JsonObject, value: unknown): string | null {
    const v = this.validator('schema', schema);
    if (v(value)) return null;
    const e = v.errors?.[0];
    return e ? `${e.instancePath || '/'}: ${e.message ?? 'does not match'}` : 'does not match';
  }

  private validator(where: string, schema: JsonObject): ValidateFunction {
    const text = JSON.stringify(schema);
    const known = this.cache.get(text);
    if (known) return known;
    if (Buffer.byteLength(text, 'utf8') > MAX_SCHEMA_BYTES)
      throw new SchemaError(`${where}: a schema is at most ${MAX_SCHEMA_BYTES} bytes as JSON`);
    let v: ValidateFunction;
    try {
      // A schema given twice (by $id) would clash in Ajv's registry: compiled without its $id.
      const { $id: _id, ...rest } = schema;
      // Draft-07 unless the schema names draft 2019-09 or 2020-12.
      const named = typeof schema.$schema === 'string' ? schema.$schema : '';
      const ajv = named.includes('2020-12')
        ? this.draft2020
        : named.includes('2019-09')
          ? this.draft2019
          : this.draft07;
      v = ajv.compile(rest);
    } catch (e) {
      throw new SchemaError(`${where}: ${(e as Error).message}`);
    }
    if (this.cache.size >= MAX_CACHED) this.cache.delete(this.cache.keys().next().value!);
    this.cache.set(text, v);
    return v;
  }
}
