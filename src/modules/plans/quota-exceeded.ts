import { DomainError } from '../../core/errors/domain-error';
import type { LimitName } from './plan-limits';

/** The stable code of a refusal by a plan's quota or queue cap (HTTP 429). */
export const QUOTA_EXCEEDED = 'QUOTA_EXCEEDED';

/** What a quota refusal names: the limit, its value and the use it was checked against. */
export interface QuotaRefusal {
  limit: LimitName;
  value: number;
  current: number;
}

/** A refusal by a plan's quota: 429 QUOTA_EXCEEDED with details {limit, value, current}; nothing was written. */
export function quotaExceeded(r: QuotaRefusal, message?: string): DomainError {
  return new DomainError(
    QUOTA_EXCEEDED,
    message ?? `over the plan's ${r.limit} (${r.value}; current use ${r.current})`,
    429,
    { limit: r.limit, value: r.value, current: r.current },
  );
}
