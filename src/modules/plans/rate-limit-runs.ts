import { Injectable } from '@nestjs/common';
import { LimitHits } from './limit-hits';
import { noteLimit } from './rate-limit-context';
import type { CheckedLimit } from './rate-limit-fields';
import { rateLimited, rateLimiterUnavailable } from './rate-limit.errors';
import { RateLimitStore, RateLimitStoreUnavailable, type Window, type WindowState } from './rate-limit-store';
import { TenantLimits } from './tenant-limits';

/**
 * The window that carries runsPerMinute with runsBurst: a bucket of at most `burst` runs that fills
 * up again `burst / perMinute` minutes after it opened, in whole seconds. Its rate never exceeds
 * perMinute nor its size burst: when burst is less than one second's worth of perMinute, the
 * bucket is `burst` runs per second.
 */
export function runsWindow(perMinute: number, burst = perMinute): Window {
  const windowSeconds = Math.max(1, Math.ceil((60 * burst) / perMinute));
  return { limit: Math.max(1, Math.min(burst, Math.floor((perMinute * windowSeconds) / 60))), windowSeconds };
}

/** Milliseconds before a window closes after which points are no longer returned to it. */
const GIVE_BACK_MARGIN_MS = 250;

type Created = { created: boolean } | { created: boolean }[];

/**
 * runsPerMinute: a tenant's run creations (API, replays, reruns, schedule fires; not the child
 * runs of `dag` steps) take one point each from its bucket before they are written; a creation
 * over it is 429 RATE_LIMITED and writes nothing. Tenants without the limit pay no query. Counted in the store every replica shares; a store that
 * does not answer refuses the creation (503 RATE_LIMITER_UNAVAILABLE).
 */
@Injectable()
export class RunRateLimit {
  constructor(
    private readonly limits: TenantLimits,
    private readonly store: RateLimitStore,
    private readonly hits: LimitHits,
  ) {}

  /**
   * Takes `n` runs from the tenant's bucket for a creation that follows at once (a replay, a rerun:
   * each makes a new run, so nothing is returned). Over the limit: RATE_LIMITED.
   */
  async take(tenantId: string, n: number): Promise<void> {
    const taken = await this.takeOrRefuse(tenantId, n);
    if (taken) noteLimit({ limit: 'runsPerMinute', state: taken.state });
  }

  /**
   * Runs `create`, which makes up to `n` runs of `tenantId`, within the tenant's runsPerMinute: the
   * points of requests that created no run (a repeated run token, a refusal) go back.
   */
  async creating<T extends Created>(tenantId: string, n: number, create: () => Promise<T>): Promise<T> {
    const taken = await this.takeOrRefuse(tenantId, n);
    if (!taken) return create();
    let made = 0;
    try {
      const r = await create();
      made = Array.isArray(r) ? r.filter((x) => x.created).length : r.created ? 1 : 0;
      const state = { ...taken.state, remaining: taken.state.remaining + n - made };
      noteLimit({ limit: 'runsPerMinute', state });
      return r;
    } finally {
      await this.store.giveBack(taken.key, n - made, taken.w, taken.openUntil);
    }
  }

  /** Takes `n` points from the tenant's bucket (null: the tenant has no runsPerMinute). */
  private async takeOrRefuse(
    tenantId: string,
    n: number,
  ): Promise<{ key: string; w: Window; state: WindowState; openUntil: number } | null> {
    const limits = (await this.limits.get(tenantId))?.limits;
    if (!limits?.runsPerMinute || n <= 0) return null;
    const w = runsWindow(limits.runsPerMinute, limits.runsBurst ?? undefined);
    const key = `runs:${tenantId}`;
    let state: WindowState;
    try {
      state = await this.store.take(key, n, w);
    } catch (e) {
      if (e instanceof RateLimitStoreUnavailable) throw rateLimiterUnavailable();
      throw e;
    }
    const openUntil = Date.now() + state.msBeforeReset - GIVE_BACK_MARGIN_MS;
    if (!state.allowed) {
      // A refused batch leaves the bucket as it found it: a smaller one may still fit.
      await this.store.giveBack(key, n, w, openUntil);
      const checked: CheckedLimit[] = [{ limit: 'runsPerMinute', state }];
      const e = rateLimited(checked, n === 1 ? 'run creation' : `creation of ${n} runs`);
      this.hits.recordError(tenantId, e);
      throw e;
    }
    return { key, w, state, openUntil };
  }
}

/**
 * `create` (up to `n` runs of `tenantId`) within the tenant's runsPerMinute, or as it is where no
 * limiter is wired (a RunsService built by hand).
 */
export function takeRuns<T extends Created>(
  limit: RunRateLimit | undefined,
  tenantId: string,
  n: number,
  create: () => Promise<T>,
): Promise<T> {
  return limit ? limit.creating(tenantId, n, create) : create();
}
