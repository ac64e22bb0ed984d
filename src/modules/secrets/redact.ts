/** What a redacted secret value is replaced with. */
export const REDACTED = '[redacted]';

function forms(value: string): string[] {
  const out = new Set<string>([value]);
  // As it appears inside a JSON string (quotes, backslashes, control and non-ASCII escapes).
  out.add(JSON.stringify(value).slice(1, -1));
  out.add(
    JSON.stringify(value)
      .slice(1, -1)
      .replace(/[\u007f-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`),
  );
  // As commonly re-encoded on the way out: URL components and base64 (e.g. Basic auth headers).
  out.add(encodeURIComponent(value));
  out.add(Buffer.from(value, 'utf8').toString('base64'));
  out.add(Buffer.from(value, 'utf8').toString('base64url'));
  return [...out];
}

const escapeRe = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

/**
 * Returns a function that replaces every occurrence of the given secret values — and of their
 * JSON-escaped, URL-encoded and base64 forms — with `[redacted]`. The longest form wins where forms
 * overlap, so a secret that contains another is removed whole. Empty values are ignored.
 */
export function makeRedactor(values: readonly string[]): (text: string) => string {
  const all = [...new Set(values.filter((v) => typeof v === 'string' && v.length > 0).flatMap(forms))].filter(
    (f) => f.length > 0,
  );
  if (all.length === 0) return (text) => text;
  all.sort((a, b) => b.length - a.length || (a < b ? -1 : 1));
  const re = new RegExp(all.map(escapeRe).join('|'), 'g');
  return (text) => (typeof text === 'string' && text.length > 0 ? text.replace(re, REDACTED) : text);
}

/**
 * A JSON value with `redact` applied to each of its strings, keys included (numbers, booleans and
 * null are kept): redacting the value's text instead could cut through its structure (a secret
 * `true` or `1,2`) and leave it no longer JSON.
 */
export function redactJson<T>(redact: (text: string) => string, value: T): T {
  const walk = (v: unknown): unknown => {
    if (typeof v === 'string') return redact(v);
    if (Array.isArray(v)) return v.map(walk);
    if (v !== null && typeof v === 'object')
      return Object.fromEntries(Object.entries(v as Record<string, unknown>).map(([k, x]) => [redact(k), walk(x)]));
    return v;
  };
  return walk(value) as T;
}
