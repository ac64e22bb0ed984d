import { z } from 'zod';

/** At most 16 digits: every bound used is at most Number.MAX_SAFE_INTEGER (16 digits). */
const DIGITS = /^\d{1,16}$/;

/**
 * An integer in a query string or a path, read only from decimal digits: an empty value, blanks, a
 * sign, `0x10`, `1e3` or `1.0` are refused (`Number()`, which z.coerce uses, reads `''` as 0 and the
 * others as numbers). Missing stays missing, so `dflt` or `.optional()` apply. The OpenAPI document
 * shows it as an integer with its bounds (and default).
 */
export function queryInt(min: number, max: number, dflt?: number) {
  const int = z
    .int({ error: (iss) => (iss.code === 'invalid_type' ? 'expected an integer (decimal digits)' : undefined) })
    .min(min)
    .max(max);
  return z.preprocess(
    (v) => (typeof v === 'string' && DIGITS.test(v) ? Number(v) : v),
    dflt === undefined ? int : int.default(dflt),
  );
}
