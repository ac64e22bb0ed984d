import { DomainError } from '../../core/errors/domain-error';
import { expiringLimit, rateLimitFields, secondsToReset, type CheckedLimit } from './rate-limit-fields';

/**
 * 429 RATE_LIMITED for the refused limits among `checked`: `Retry-After` (seconds until the last of
 * them reopens) and the RateLimit fields; details name the limit, its value and the wait.
 */
export function rateLimited(checked: CheckedLimit[], what: string): DomainError {
  const refused = checked.filter((c) => !c.state.allowed);
  const exp = expiringLimit(refused);
  const retryAfter = secondsToReset(exp.state);
  return new DomainError(
    'RATE_LIMITED',
    `${what}: over the limit ${exp.limit} (${exp.state.limit} per ${exp.state.windowSeconds} s); retry in ${retryAfter} s`,
    429,
    { limit: exp.limit, value: exp.state.limit, windowSeconds: exp.state.windowSeconds, retryAfterSeconds: retryAfter },
    { 'Retry-After': String(retryAfter), ...rateLimitFields(checked) },
  );
}

/** Seconds a client is told to wait when the limiter's store does not answer. */
const UNAVAILABLE_RETRY_AFTER_S = 5;

/** 503 RATE_LIMITER_UNAVAILABLE: a limited request or creation is refused while the limiter's store is out. */
export function rateLimiterUnavailable(): DomainError {
  return new DomainError(
    'RATE_LIMITER_UNAVAILABLE',
    'the rate limiter cannot be reached; limited requests are refused until it answers',
    503,
    undefined,
    { 'Retry-After': String(UNAVAILABLE_RETRY_AFTER_S) },
  );
}
