import type { JsonValue } from '../plugins/plugin';

/**
 * Applies `redact` to every string (keys included) of a JSON value, leaving its structure intact:
 * unlike redacting serialized JSON, a secret that happens to span JSON syntax cannot break it.
 */
export function redactJson<T extends JsonValue>(value: T, redact: (text: string) => string): T {
  const walk = (v: JsonValue): JsonValue => {
    if (typeof v === 'string') return redact(v);
    if (Array.isArray(v)) return v.map(walk);
    if (v !== null && typeof v === 'object') {
      const out: { [k: string]: JsonValue } = {};
      for (const [k, x] of Object.entries(v)) {
        Object.defineProperty(out, redact(k), { value: walk(x), enumerable: true, writable: true, configurable: true });
      }
      return out;
    }
    return v;
  };
  return walk(value) as T;
}
