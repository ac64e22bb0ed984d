import type { z } from 'zod';
import type { Plugin } from '../plugins/plugin';
import { egressListAllows, urlPort } from '../sandbox/egress';
import type { TemplatedString, TemplateRef } from '../templating/template';
import type { StepDefinition } from './dag-definition';

/**
 * Checks at publish of what a step will meet at run time, as far as the definition alone tells:
 * the types templates yield against the plugin's config schema, the inputs templates read against
 * the inputs schema, and the hosts an `http` or `cli` step names against its egress list.
 */

/** One problem in a published definition: where (dotted path), which step, what; `code` for the publish checks. */
export interface DagIssue {
  path: string;
  step?: string;
  code?: DagIssueCode;
  message: string;
}

export type DagIssueCode = 'TEMPLATE_TYPE_MISMATCH' | 'INPUT_UNDECLARED' | 'URL_INVALID' | 'EGRESS_NOT_ALLOWED';

/** Something that publishes but may fail at run time; returned with the version and stored with it. */
export interface DagWarning {
  code: DagWarningCode;
  stepId: string;
  path: string;
  message: string;
}

export const DAG_WARNING_CODES = ['INPUT_NOT_REQUIRED', 'EGRESS_NOT_DECLARED'] as const;
export type DagWarningCode = (typeof DAG_WARNING_CODES)[number];

export type JsonType = 'string' | 'number' | 'integer' | 'boolean' | 'object' | 'array' | 'null';
type Schema = Record<string, unknown>;

const isSchema = (v: unknown): v is Schema => v !== null && typeof v === 'object' && !Array.isArray(v);

function jsonTypeOf(v: unknown): JsonType | undefined {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'array';
  switch (typeof v) {
    case 'string':
      return 'string';
    case 'boolean':
      return 'boolean';
    case 'number':
      return Number.isInteger(v) ? 'integer' : 'number';
    case 'object':
      return 'object';
    default:
      return undefined;
  }
}

/** The one JSON type a schema node admits, when it says so (`type`, `const`, or an `enum` of one type). */
function declaredType(node: unknown): JsonType | undefined {
  if (!isSchema(node)) return undefined;
  const t = node.type;
  if (typeof t === 'string') return t as JsonType;
  if (Array.isArray(t)) return t.length === 1 ? (t[0] as JsonType) : undefined;
  if ('const' in node) return jsonTypeOf(node.const);
  if (Array.isArray(node.enum) && node.enum.length > 0) {
    const types = new Set(node.enum.map(jsonTypeOf));
    return types.size === 1 ? [...types][0] : undefined;
  }
  return undefined;
}

/** What reading `inputs.<path>` meets, per the inputs schema. */
export interface InputRead {
  /** The path names a member the schema does not declare: it never resolves on valid inputs. */
  undeclared?: { at: string[]; message: string };
  /** The first member on the path the schema declares but does not require. */
  optional?: { at: string[]; hasDefault: boolean };
  /** The type of the value read, when the schema fixes it. */
  type?: JsonType;
}

const MAX_REF_HOPS = 32;

/**
 * Follows `inputs.<path>` through the inputs schema (properties, patternProperties,
 * additionalProperties, items, prefixItems, local `$ref`s). An object schema that describes none
 * of its members (no `properties`, `patternProperties` or `additionalProperties` schema), and any
 * `allOf`/`anyOf`/`oneOf`/`not`, end the walk: beyond them nothing is known, nothing is reported.
 */
export function readInput(schema: Schema, path: readonly string[]): InputRead {
  const defs = isSchema(schema.$defs) ? schema.$defs : {};
  const deref = (n: unknown): unknown => {
    for (let hops = 0; isSchema(n) && typeof n.$ref === 'string'; hops++) {
      if (hops >= MAX_REF_HOPS) return undefined;
      const m = /^#\/\$defs\/([^/]+)$/.exec(n.$ref);
      if (n.$ref === '#') n = schema;
      else if (m && Object.hasOwn(defs, m[1])) n = defs[m[1]];
      else return undefined;
    }
    return n;
  };
  const name = (p: readonly string[]) => ['inputs', ...p].join('.');
  let node = deref(schema);
  let optional: InputRead['optional'];
  for (let i = 0; i < path.length; i++) {
    if (!isSchema(node)) return { optional };
    const here = node;
    if (['allOf', 'anyOf', 'oneOf', 'not'].some((k) => k in here)) return { optional };
    const seg = path[i];
    const at = path.slice(0, i + 1);
    const type = declaredType(node);
    const props = isSchema(node.properties) ? node.properties : undefined;
    const patterns = isSchema(node.patternProperties) ? node.patternProperties : undefined;
    if (props || patterns || isSchema(node.additionalProperties)) {
      let child: unknown;
      const pattern = Object.entries(patterns ?? {}).find(([p]) => new RegExp(p, 'u').test(seg));
      if (props && Object.hasOwn(props, seg)) child = props[seg];
      else if (pattern) child = pattern[1];
      else if (node.additionalProperties !== undefined && node.additionalProperties !== false) {
        child = node.additionalProperties === true ? {} : node.additionalProperties;
      } else {
        const declared = Object.keys(props ?? {});
        return {
          undeclared: {
            at,
            message:
              `template reads ${name(at)}, which the inputs schema does not declare` +
              (declared.length > 0 ? ` (${name(path.slice(0, i))} declares ${declared.join(', ')})` : ''),
          },
        };
      }
      const required = Array.isArray(node.required) ? (node.required as unknown[]) : [];
      if (!required.includes(seg)) optional ??= { at, hasDefault: isSchema(child) && 'default' in child };
      node = deref(child);
    } else if (type === 'array') {
      if (!/^\d+$/.test(seg)) {
        return { undeclared: { at, message: `template reads ${name(at)}, but ${name(path.slice(0, i))} is an array` } };
      }
      const prefix = Array.isArray(node.prefixItems) ? (node.prefixItems as unknown[]) : [];
      node = deref(Number(seg) < prefix.length ? prefix[Number(seg)] : node.items);
    } else if (type !== undefined && type !== 'object') {
      return {
        undeclared: { at, message: `template reads ${name(at)}, but ${name(path.slice(0, i))} is declared ${type}` },
      };
    } else return { optional };
  }
  return { optional, type: declaredType(node) };
}

/** A value of each JSON type, put where a template of that type stands to see what the plugin's schema says. */
const SAMPLE: Record<JsonType, unknown> = {
  string: 'x',
  number: 1,
  integer: 1,
  boolean: true,
  object: {},
  array: [],
  null: null,
};

function sameType(a: JsonType | undefined, b: JsonType): boolean {
  const norm = (t: JsonType | undefined) => (t === 'integer' ? 'number' : t);
  return norm(a) === norm(b);
}

/**
 * What the schema expected instead, when `issue` (at the place a sample of `type` stood) refuses
 * the sample's type rather than its value: `invalid_type`, an enum of other types, or a union
 * every branch of which refuses the type.
 */
function typeRefusal(issue: z.core.$ZodIssue, type: JsonType): string | undefined {
  switch (issue.code) {
    case 'invalid_type':
      return issue.expected;
    case 'invalid_value':
      return issue.values.every((v) => !sameType(jsonTypeOf(v), type))
        ? `one of ${issue.values.map((v) => JSON.stringify(v)).join(', ')}`
        : undefined;
    case 'invalid_union': {
      if (issue.errors.length === 0) return undefined;
      const expected: string[] = [];
      for (const branch of issue.errors) {
        const refusal = branch
          .filter((b) => b.path.length === 0)
          .map((b) => typeRefusal(b, type))
          .find((x) => x !== undefined);
        if (refusal === undefined) return undefined;
        if (!expected.includes(refusal)) expected.push(refusal);
      }
      return expected.join(' or ');
    }
    default:
      return undefined;
  }
}

/** `value` with the strings at the given paths replaced (objects rebuilt as own data properties). */
function substitute(value: unknown, replace: Map<string, unknown>, path: string[] = []): unknown {
  const key = JSON.stringify(path);
  if (replace.has(key)) return replace.get(key);
  if (Array.isArray(value)) return value.map((v, i) => substitute(v, replace, [...path, String(i)]));
  if (isSchema(value)) {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, substitute(v, replace, [...path, k])]));
  }
  return value;
}

/**
 * Templates whose result type is known, checked against the plugin's own config schema: a string
 * with text around its expressions yields a string, `${{ secrets.X }}` a string, and a whole-string
 * `${{ inputs.x }}` the type the inputs schema declares for x. The config is validated with each
 * such template replaced by a value of its type; a refusal of that type at that place is an issue.
 */
export function templateTypeIssues(
  plugin: Plugin,
  config: Record<string, unknown>,
  strings: readonly TemplatedString[],
  inputType: (ref: TemplateRef) => JsonType | undefined,
  at: string,
  stepId: string,
): DagIssue[] {
  const known = new Map<string, { type: JsonType; source: string; path: string[] }>();
  for (const t of strings) {
    const first = t.refs[0];
    if (!t.whole) {
      known.set(JSON.stringify(t.path), { type: 'string', source: 'text around a template', path: t.path });
    } else if (first.ref.kind === 'secrets') {
      known.set(JSON.stringify(t.path), {
        type: 'string',
        source: `\${{ ${first.expression} }} (a secret)`,
        path: t.path,
      });
    } else if (first.ref.kind === 'inputs') {
      const type = inputType(first.ref);
      if (type !== undefined) {
        const source = `\${{ ${first.expression} }} (declared ${type} by the inputs schema)`;
        known.set(JSON.stringify(t.path), { type, source, path: t.path });
      }
    }
  }
  if (known.size === 0) return [];
  const samples = new Map([...known].map(([k, v]) => [k, SAMPLE[v.type]]));
  const r = plugin.configSchema.safeParse(substitute(config, samples));
  if (r.success) return [];
  const issues: DagIssue[] = [];
  for (const i of r.error.issues) {
    const probe = known.get(JSON.stringify(i.path.map(String)));
    if (!probe) continue;
    const expected = typeRefusal(i, probe.type);
    if (expected === undefined) continue;
    issues.push({
      path: [at, 'with', ...probe.path].join('.'),
      step: stepId,
      code: 'TEMPLATE_TYPE_MISMATCH',
      message: `${plugin.name} config expects ${expected} here, but ${probe.source} yields ${
        probe.type === 'string' ? 'a string' : probe.type
      }`,
    });
  }
  return issues;
}

/** The URL a string names up to its host and port, when no template stands before the end of its authority. */
function literalOrigin(s: string, templated: boolean): string | undefined {
  if (!templated) return s;
  if (s.includes('$${{')) return undefined;
  const prefix = s.slice(0, s.indexOf('${{'));
  const m = /^[A-Za-z][A-Za-z0-9+.-]*:\/\/[^/?#]*[/?#]/.exec(prefix);
  return m ? m[0] : undefined;
}

function hostAndPort(url: URL): string {
  return `${url.hostname}:${urlPort(url)}`;
}

/**
 * An `http` step's URL, when its host is literal: a valid http(s) URL without credentials, whose
 * host and port an entry of the step's egress list allows (else the call fails with EGRESS_DENIED).
 */
export function httpEgressIssues(step: StepDefinition, at: string, urlTemplated: boolean): DagIssue[] {
  const raw = step.with.url;
  if (typeof raw !== 'string') return [];
  const origin = literalOrigin(raw, urlTemplated);
  if (origin === undefined) return [];
  const path = `${at}.with.url`;
  let url: URL;
  try {
    url = new URL(origin);
  } catch {
    return [{ path, step: step.id, code: 'URL_INVALID', message: `http url "${raw}" is not a valid URL` }];
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    const message = `http url "${raw}": only http and https URLs are allowed, not ${url.protocol}`;
    return [{ path, step: step.id, code: 'URL_INVALID', message }];
  }
  if (url.username || url.password) {
    const message = 'http url carries credentials, which are refused: send them in a header (from a secret)';
    return [{ path, step: step.id, code: 'URL_INVALID', message }];
  }
  if (egressListAllows(step.egress, url.hostname, urlPort(url))) return [];
  return [
    {
      path,
      step: step.id,
      code: 'EGRESS_NOT_ALLOWED',
      message: `http url reaches ${hostAndPort(url)}, which ${
        step.egress.length === 0
          ? 'the step cannot reach: it declares no egress'
          : "no entry of the step's egress allows"
      } (add "${url.host}" to the step's egress); the call would fail with EGRESS_DENIED`,
    },
  ];
}

const URL_IN_TEXT = /\bhttps?:\/\/[^\s"'<>`]+/gi;

/**
 * http(s) URLs written literally in a `cli` step's arguments and environment whose host the step's
 * egress does not allow: the sandbox has no network but the egress proxy, so a command that
 * fetches them fails. A warning, not an error: an argument that names a URL need not fetch it.
 */
export function cliEgressWarnings(step: StepDefinition, at: string): DagWarning[] {
  const out: DagWarning[] = [];
  const check = (v: unknown, path: string) => {
    if (typeof v !== 'string') return;
    for (const m of v.replaceAll(/\$?\$\{\{[\s\S]*?\}\}/g, ' ').matchAll(URL_IN_TEXT)) {
      let url: URL;
      try {
        url = new URL(m[0]);
      } catch {
        continue;
      }
      if (egressListAllows(step.egress, url.hostname, urlPort(url))) continue;
      out.push({
        code: 'EGRESS_NOT_DECLARED',
        stepId: step.id,
        path,
        message: `names ${url.origin}, but the step's egress does not allow ${hostAndPort(url)}: a command that fetches it fails (add "${url.host}" to egress)`,
      });
    }
  };
  const { args, env } = step.with;
  if (Array.isArray(args)) args.forEach((a, i) => check(a, `${at}.with.args.${i}`));
  if (isSchema(env)) for (const [k, v] of Object.entries(env)) check(v, `${at}.with.env.${k}`);
  return out;
}

/**
 * The inputs a step's templates read, against the inputs schema: a read of an undeclared member is
 * an issue; a read of a member that is declared but not required is a warning, since a run without
 * it fails with TEMPLATE_UNRESOLVED (run inputs are stored as given: a schema `default` is not
 * filled in).
 */
export function inputReadFindings(
  schema: Schema,
  strings: readonly TemplatedString[],
  at: string,
  stepId: string,
): { issues: DagIssue[]; warnings: DagWarning[]; types: Map<TemplateRef, JsonType> } {
  const issues: DagIssue[] = [];
  const warnings: DagWarning[] = [];
  const types = new Map<TemplateRef, JsonType>();
  const seen = new Set<string>();
  for (const t of strings) {
    const path = [at, 'with', ...t.path].join('.');
    for (const { ref } of t.refs) {
      if (ref.kind !== 'inputs') continue;
      const read = readInput(schema, ref.path);
      if (read.type !== undefined) types.set(ref, read.type);
      const once = (what: string) => {
        const k = `${path}\n${what}`;
        if (seen.has(k)) return false;
        seen.add(k);
        return true;
      };
      if (read.undeclared) {
        if (once(read.undeclared.at.join('.')))
          issues.push({ path, step: stepId, code: 'INPUT_UNDECLARED', message: read.undeclared.message });
      } else if (read.optional && once(read.optional.at.join('.'))) {
        const name = ['inputs', ...read.optional.at].join('.');
        warnings.push({
          code: 'INPUT_NOT_REQUIRED',
          stepId,
          path,
          message:
            `template reads ${name}, which the inputs schema declares but does not require: a run without it fails ` +
            `with TEMPLATE_UNRESOLVED (add it to required${read.optional.hasDefault ? '; its default is not filled into run inputs' : ''})`,
        });
      }
    }
  }
  return { issues, warnings, types };
}
