import { DomainError } from '../../core/errors/domain-error';
import type { JsonValue } from '../plugins/plugin';

/**
 * Templating on JSON values: `${{ inputs.a.b }}`, `${{ steps.<id>.outputs.x[0].y }}` and
 * `${{ secrets.NAME }}` inside strings (and, in a map step, `${{ map.item… }}` and `${{ map.index }}`). Expressions are paths, never code: there are no operators,
 * calls or filters. A string that is exactly one expression becomes the referenced JSON value (its
 * type kept); expressions inside a longer string are replaced by their text (JSON for objects and
 * arrays). `$${{` stands for a literal `${{`. Substituted values are never templated again.
 */

export type TemplateRefKind = 'inputs' | 'steps' | 'secrets' | 'map';

export interface TemplateRef {
  kind: TemplateRefKind;
  /** Segments after the root: `steps.a.outputs.x[0]` → ['a', 'outputs', 'x', '0']. */
  path: string[];
}

export interface TemplateScope {
  inputs: JsonValue;
  steps: Record<string, { outputs: JsonValue }>;
  secrets?: Record<string, string>;
  /** A map instance's element and index. */
  map?: { item: JsonValue; index: number };
}

export interface RenderResult {
  value: JsonValue;
  /** Names of the secrets the value references, sorted, each once. */
  usedSecrets: string[];
}

/** A template that cannot be parsed (TEMPLATE_INVALID) or resolved (TEMPLATE_UNRESOLVED). */
export class TemplateError extends DomainError {
  constructor(
    code: 'TEMPLATE_INVALID' | 'TEMPLATE_UNRESOLVED' | 'TEMPLATE_TOO_DEEP',
    message: string,
    details: { expression?: string; path?: string[] },
  ) {
    super(code, message, 400, details);
    this.name = 'TemplateError';
  }
}

/** Nesting deeper than this in a templated value is refused rather than risking the stack. */
export const MAX_TEMPLATE_DEPTH = 128;

const MARKER = '${{';
// `$${{ … }}` (escaped, literal) or `${{ … }}`; the expression cannot contain `}}`.
const EXPRESSION = /(\$?)\$\{\{([\s\S]*?)\}\}/g;
const WHOLE = /^\$\{\{([\s\S]*?)\}\}$/;
const IDENT = /^[\p{L}\p{N}_-]+$/u;

/** True when the string holds at least one (unescaped) template expression. */
export function isTemplated(s: string): boolean {
  if (!s.includes(MARKER)) return false;
  for (const m of s.matchAll(EXPRESSION)) if (m[1] === '') return true;
  return false;
}

/** Parses one expression body (`steps.a.outputs.x[0]`) into a reference. */
export function parseExpression(expression: string): TemplateRef {
  const src = expression.trim();
  const segments: string[] = [];
  let i = 0;
  const fail = (why: string): never => {
    throw new TemplateError('TEMPLATE_INVALID', `invalid template expression "${src}": ${why}`, { expression: src });
  };
  const readIdent = () => {
    const m = /^[\p{L}\p{N}_-]+/u.exec(src.slice(i));
    if (!m) fail(`expected a name at offset ${i}`);
    i += m![0].length;
    return m![0];
  };
  segments.push(readIdent());
  while (i < src.length) {
    const c = src[i];
    if (c === '.') {
      i++;
      segments.push(readIdent());
    } else if (c === '[') {
      const rest = src.slice(i);
      const num = /^\[(\d{1,9})\]/.exec(rest);
      const str = /^\[\s*(?:"((?:[^"\\]|\\.)*)"|'((?:[^'\\]|\\.)*)')\s*\]/.exec(rest);
      if (num) {
        segments.push(num[1]);
        i += num[0].length;
      } else if (str) {
        const raw = str[1] ?? str[2];
        segments.push(raw.replace(/\\(.)/g, '$1'));
        i += str[0].length;
      } else fail(`expected [index] or ["key"] at offset ${i}`);
    } else fail(`unexpected "${c}" at offset ${i}`);
  }
  const [root, ...path] = segments;
  switch (root) {
    case 'inputs':
      return { kind: 'inputs', path };
    case 'steps':
      if (path.length < 2 || path[1] !== 'outputs' || !IDENT.test(path[0])) fail('expected steps.<id>.outputs…');
      return { kind: 'steps', path };
    case 'secrets':
      if (path.length !== 1) fail('expected secrets.NAME');
      return { kind: 'secrets', path };
    case 'map':
      if (!(path[0] === 'item' || (path[0] === 'index' && path.length === 1))) fail('expected map.item… or map.index');
      return { kind: 'map', path };
    default:
      return fail('must start with inputs, steps, secrets or map');
  }
}

function unescape(literal: string): string {
  return literal.replaceAll('$' + MARKER, MARKER);
}

type Part = { literal: string } | { ref: TemplateRef; expression: string };

function parseString(s: string): Part[] {
  const parts: Part[] = [];
  let last = 0;
  for (const m of s.matchAll(EXPRESSION)) {
    const at = m.index;
    if (at > last) parts.push({ literal: unescape(s.slice(last, at)) });
    if (m[1] === '$') parts.push({ literal: m[0].slice(1) });
    else parts.push({ ref: parseExpression(m[2]), expression: m[2].trim() });
    last = at + m[0].length;
  }
  if (last < s.length) parts.push({ literal: unescape(s.slice(last)) });
  // Whatever `${{` remains outside matched expressions has no closing `}}`.
  const stray = s.replace(EXPRESSION, '').replaceAll('$' + MARKER, '');
  if (stray.includes(MARKER)) {
    throw new TemplateError(
      'TEMPLATE_INVALID',
      'unclosed template expression: "${{" without "}}" (write $${{ for a literal)',
      {},
    );
  }
  return parts;
}

/** One templated string of a value: where it is, what it references, whether it is one whole expression. */
export interface TemplatedString {
  /** Keys and indexes from the value's root to the string. */
  path: string[];
  /** The references in the string, in order, with their expression text. */
  refs: { ref: TemplateRef; expression: string }[];
  /** The string is exactly one expression: it renders as the referenced value, its type kept. */
  whole: boolean;
}

/** The one reference a whole-string template renders as, or undefined when `s` renders as a string. */
function wholeRef(s: string, parts: Part[]): { ref: TemplateRef; expression: string } | undefined {
  const p = parts.length === 1 ? parts[0] : undefined;
  return p !== undefined && 'ref' in p && WHOLE.test(s) ? p : undefined;
}

/** Every string of `value` that holds a template expression, in document order. */
export function templatedStrings(value: unknown): TemplatedString[] {
  const out: TemplatedString[] = [];
  const visit = (v: unknown, path: string[]): void => {
    if (path.length > MAX_TEMPLATE_DEPTH) {
      throw new TemplateError('TEMPLATE_TOO_DEEP', `templated value nested deeper than ${MAX_TEMPLATE_DEPTH}`, {});
    }
    if (typeof v === 'string') {
      if (!v.includes(MARKER)) return;
      const parts = parseString(v);
      const refs = parts.filter((p): p is Extract<Part, { ref: TemplateRef }> => 'ref' in p);
      if (refs.length > 0) out.push({ path, refs, whole: wholeRef(v, parts) !== undefined });
    } else if (Array.isArray(v)) v.forEach((x, i) => visit(x, [...path, String(i)]));
    else if (v !== null && typeof v === 'object') for (const [k, x] of Object.entries(v)) visit(x, [...path, k]);
  };
  visit(value, []);
  return out;
}

function walk(value: unknown, depth: number, onString: (s: string) => void): void {
  if (depth > MAX_TEMPLATE_DEPTH) {
    throw new TemplateError('TEMPLATE_TOO_DEEP', `templated value nested deeper than ${MAX_TEMPLATE_DEPTH}`, {});
  }
  if (typeof value === 'string') onString(value);
  else if (Array.isArray(value)) for (const v of value) walk(v, depth + 1, onString);
  else if (value !== null && typeof value === 'object')
    for (const v of Object.values(value)) walk(v, depth + 1, onString);
}

/** Every reference in a JSON value's strings, in document order (duplicates kept). */
export function templateRefs(value: unknown): TemplateRef[] {
  const out: TemplateRef[] = [];
  walk(value, 0, (s) => {
    if (!s.includes(MARKER)) return;
    for (const p of parseString(s)) if ('ref' in p) out.push(p.ref);
  });
  return out;
}

function own(container: unknown, key: string): { found: true; value: unknown } | { found: false } {
  if (Array.isArray(container)) {
    if (!/^\d+$/.test(key)) return { found: false };
    const i = Number(key);
    return i < container.length ? { found: true, value: container[i] } : { found: false };
  }
  if (container !== null && typeof container === 'object' && Object.prototype.hasOwnProperty.call(container, key)) {
    return { found: true, value: (container as Record<string, unknown>)[key] };
  }
  return { found: false };
}

function resolve(ref: TemplateRef, expression: string, scope: TemplateScope, usedSecrets: Set<string>): JsonValue {
  const unresolved = (upTo: number): never => {
    const path = [ref.kind, ...ref.path.slice(0, upTo + 1)];
    throw new TemplateError('TEMPLATE_UNRESOLVED', `template reference ${formatPath(path)} does not resolve`, {
      expression,
      path,
    });
  };
  let cur: unknown;
  switch (ref.kind) {
    case 'inputs':
      cur = scope.inputs;
      break;
    case 'steps':
      cur = scope.steps;
      break;
    case 'map':
      if (scope.map === undefined) return unresolved(0);
      cur = scope.map;
      break;
    case 'secrets': {
      const r = own(scope.secrets ?? {}, ref.path[0]);
      if (!r.found || typeof r.value !== 'string') return unresolved(0);
      usedSecrets.add(ref.path[0]);
      return r.value;
    }
  }
  for (let i = 0; i < ref.path.length; i++) {
    const r = own(cur, ref.path[i]);
    if (!r.found || r.value === undefined) return unresolved(i);
    cur = r.value;
  }
  return cur as JsonValue;
}

function formatPath(path: string[]): string {
  return path
    .map((p, i) =>
      i === 0 ? p : IDENT.test(p) && !/^\d+$/.test(p) ? `.${p}` : /^\d+$/.test(p) ? `[${p}]` : `[${JSON.stringify(p)}]`,
    )
    .join('');
}

function stringify(v: JsonValue): string {
  return typeof v === 'string' ? v : JSON.stringify(v);
}

function renderString(s: string, scope: TemplateScope, usedSecrets: Set<string>): JsonValue {
  if (!s.includes(MARKER)) return s;
  const parts = parseString(s);
  const whole = wholeRef(s, parts);
  if (whole) return resolve(whole.ref, whole.expression, scope, usedSecrets);
  return parts
    .map((p) => ('literal' in p ? p.literal : stringify(resolve(p.ref, p.expression, scope, usedSecrets))))
    .join('');
}

function renderValue(value: unknown, scope: TemplateScope, usedSecrets: Set<string>, depth: number): JsonValue {
  if (depth > MAX_TEMPLATE_DEPTH) {
    throw new TemplateError('TEMPLATE_TOO_DEEP', `templated value nested deeper than ${MAX_TEMPLATE_DEPTH}`, {});
  }
  if (typeof value === 'string') return renderString(value, scope, usedSecrets);
  if (Array.isArray(value)) return value.map((v) => renderValue(v, scope, usedSecrets, depth + 1));
  if (value !== null && typeof value === 'object') {
    // fromEntries defines own data properties, so a key named __proto__ stays a plain key.
    return Object.fromEntries(
      Object.entries(value).map(([k, v]) => [k, renderValue(v, scope, usedSecrets, depth + 1)]),
    );
  }
  if (value === undefined) return null;
  return value as JsonValue;
}

/** Replaces every expression in `value`'s strings; an unresolved reference is a TemplateError. */
export function renderTemplate(value: JsonValue, scope: TemplateScope): RenderResult {
  const used = new Set<string>();
  const out = renderValue(value, scope, used, 0);
  return { value: out, usedSecrets: [...used].sort() };
}
