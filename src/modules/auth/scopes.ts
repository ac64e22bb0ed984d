import { SCOPES, type TenantScope } from '../../core/http/route-spec';

const RANK: Record<TenantScope, number> = { 'orchestrator:read': 1, 'orchestrator:write': 2, 'orchestrator:admin': 3 };

/** admin implies write implies read. */
export function grants(held: readonly TenantScope[], needed: TenantScope): boolean {
  return held.some((s) => RANK[s] >= RANK[needed]);
}

/** True when every scope in `requested` is implied by `held` (a token never mints more than it holds). */
export function covers(held: readonly TenantScope[], requested: readonly TenantScope[]): boolean {
  return requested.every((r) => grants(held, r));
}

export function isTenantScope(s: string): s is TenantScope {
  return (SCOPES as readonly string[]).includes(s);
}
