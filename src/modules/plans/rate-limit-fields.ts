import type { LimitName } from './plan-limits';
import type { WindowState } from './rate-limit-store';

/** A limit checked for a response, with the state of its window. */
export interface CheckedLimit {
  limit: LimitName;
  state: WindowState;
}

/** Whole seconds until a window closes (at least 1 while it is open). */
export const secondsToReset = (s: WindowState): number => Math.max(1, Math.ceil(s.msBeforeReset / 1000));

/**
 * The limit a response reports: the one closest to refusing (fewest points left; among equals, the
 * one that reopens last, so that RateLimit-Reset and Retry-After name the same time).
 */
export function expiringLimit(checked: CheckedLimit[]): CheckedLimit {
  return [...checked].sort(
    (a, b) => a.state.remaining - b.state.remaining || b.state.msBeforeReset - a.state.msBeforeReset,
  )[0];
}

/**
 * The RateLimit header fields of draft-ietf-httpapi-ratelimit-headers-06: RateLimit-Limit,
 * RateLimit-Remaining and RateLimit-Reset of the expiring limit, and RateLimit-Policy listing every
 * limit checked as `<points>;w=<seconds>` (the draft allows one policy per quota value: a second
 * limit with the same value is left out).
 */
export function rateLimitFields(checked: CheckedLimit[]): Record<string, string> {
  const exp = expiringLimit(checked);
  const policies: string[] = [];
  const seen = new Set<number>();
  for (const c of [exp, ...checked]) {
    if (seen.has(c.state.limit)) continue;
    seen.add(c.state.limit);
    policies.push(`${c.state.limit};w=${c.state.windowSeconds}`);
  }
  return {
    'RateLimit-Limit': String(exp.state.limit),
    'RateLimit-Remaining': String(exp.state.remaining),
    'RateLimit-Reset': String(secondsToReset(exp.state)),
    'RateLimit-Policy': policies.join(', '),
  };
}
