/**
 * A failed API call: the error envelope (`{"error": {code, message, traceId, details?}}`) that every
 * Ordo failure answers with, plus the HTTP status. An answer that is not an envelope (a proxy's
 * page, an empty body) still becomes one, with code `HTTP_<status>`, so callers match on `code`
 * alone.
 */
export class OrdoApiError extends Error {
  override readonly name = 'OrdoApiError';

  constructor(
    /** The stable error code (`RUN_NOT_FOUND`, `VALIDATION_FAILED`, …), or `HTTP_<status>`. */
    readonly code: string,
    message: string,
    /** The HTTP status of the answer. */
    readonly status: number,
    /** The request's trace id (finds it in the server's logs), when the server gave one. */
    readonly traceId: string | undefined,
    /** Extra detail some codes carry (`issues`, `limit`, `line`/`column`, …). */
    readonly details?: unknown,
    /** Seconds the server asked to wait before a retry (Retry-After), on 429 and 503. */
    readonly retryAfterSeconds?: number,
  ) {
    super(message);
  }
}

/** Whether a value has the error envelope's shape. */
function isEnvelope(
  v: unknown,
): v is { error: { code: string; message: string; traceId?: string; details?: unknown } } {
  if (typeof v !== 'object' || v === null) return false;
  const e = (v as { error?: unknown }).error;
  return (
    typeof e === 'object' &&
    e !== null &&
    typeof (e as { code?: unknown }).code === 'string' &&
    typeof (e as { message?: unknown }).message === 'string'
  );
}

/**
 * Retry-After as seconds: delta-seconds, or an HTTP date relative to `now`. Undefined when absent
 * or unreadable.
 */
export function retryAfterSeconds(value: string | null | undefined, now = Date.now()): number | undefined {
  if (value === null || value === undefined || value.trim() === '') return undefined;
  const v = value.trim();
  if (/^\d+$/.test(v)) return Number(v);
  const at = Date.parse(v);
  return Number.isNaN(at) ? undefined : Math.max(0, Math.ceil((at - now) / 1000));
}

/**
 * Maps a failed answer to an OrdoApiError. `body` is the parsed JSON body when there was one,
 * else its text (or undefined).
 */
export function toOrdoApiError(status: number, body: unknown, headers?: Headers): OrdoApiError {
  const retryAfter = retryAfterSeconds(headers?.get('retry-after'));
  if (isEnvelope(body)) {
    const e = body.error;
    return new OrdoApiError(e.code, e.message, status, e.traceId, e.details, retryAfter);
  }
  const text = typeof body === 'string' ? body.trim() : '';
  const message = text ? `HTTP ${status}: ${text.slice(0, 200)}` : `HTTP ${status} without an error envelope`;
  return new OrdoApiError(`HTTP_${status}`, message, status, undefined, undefined, retryAfter);
}
