// Pure (no Node import): the web console verifies event hashes with the same canonical form.

/**
 * RFC 8785 (JSON Canonicalization Scheme): object members sorted by their UTF-16 code units,
 * no insignificant whitespace, numbers in ECMAScript's shortest round-trip form, strings with
 * JSON.stringify's minimal escaping. Rejects values JSON cannot represent.
 */
export function canonicalJson(value: unknown): string {
  switch (typeof value) {
    case 'string':
      return JSON.stringify(value);
    case 'number':
      if (!Number.isFinite(value)) throw new TypeError('non-finite number has no JSON form');
      return JSON.stringify(value);
    case 'boolean':
      return value ? 'true' : 'false';
    case 'object': {
      if (value === null) return 'null';
      if (Array.isArray(value)) return `[${value.map((v) => canonicalJson(v === undefined ? null : v)).join(',')}]`;
      const obj = value as Record<string, unknown> & { toJSON?: () => unknown };
      if (typeof obj.toJSON === 'function') return canonicalJson(obj.toJSON());
      const keys = Object.keys(obj)
        .filter((k) => obj[k] !== undefined && typeof obj[k] !== 'function')
        .sort(compareUtf16);
      return `{${keys.map((k) => `${JSON.stringify(k)}:${canonicalJson(obj[k])}`).join(',')}}`;
    }
    default:
      throw new TypeError(`${typeof value} has no JSON form`);
  }
}

function compareUtf16(a: string, b: string): number {
  // String comparison in JS is by UTF-16 code units, which is what RFC 8785 §3.2.3 prescribes.
  return a < b ? -1 : a > b ? 1 : 0;
}
