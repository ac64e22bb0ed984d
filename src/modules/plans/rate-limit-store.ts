import { Inject, Injectable, type OnApplicationShutdown } from '@nestjs/common';
import { Redis } from 'ioredis';
import { RateLimiterPostgres, RateLimiterRedis, RateLimiterRes, type RateLimiterAbstract } from 'rate-limiter-flexible';
import { ORDO_CONFIG } from '../../core/config/config.module';
import type { OrdoConfig } from '../../core/config/config';
import { Database } from '../../core/database/database';
import { rootLogger } from '../../core/logging/logger';

/** A window of `limit` points per `windowSeconds` (rate-limiter-flexible's fixed window, opened by its first point). */
export interface Window {
  limit: number;
  windowSeconds: number;
}

/** A key's window after points were taken from it. */
export interface WindowState extends Window {
  /** Whether the points taken fit in the window. */
  allowed: boolean;
  /** Points left in the window (0 when refused). */
  remaining: number;
  /** Milliseconds until the window closes and its points are whole again. */
  msBeforeReset: number;
}

/** The limiter's store (PostgreSQL or Redis) did not answer: limited work is refused, never let through. */
export class RateLimitStoreUnavailable extends Error {
  constructor(cause: unknown) {
    super(`rate limiter store unavailable: ${cause instanceof Error ? cause.message : String(cause)}`);
    this.name = 'RateLimitStoreUnavailable';
  }
}

/** The rate_limit table of migration 014 (rate-limiter-flexible's PostgreSQL layout). */
const TABLE = 'rate_limit';
/** How long a Redis command may take before the limiter counts the store as unavailable. */
const REDIS_COMMAND_TIMEOUT_MS = 2_000;

/**
 * The API rate limiter's counters, shared by every replica: in PostgreSQL (table rate_limit, through
 * the system pool) by default, in Redis when REDIS_URL is set. Each key counts points in a fixed
 * window that opens with its first point (rate-limiter-flexible); one limiter object serves each
 * distinct (limit, window), so tenants on different plans share the store, not their counters. No
 * state that decides a refusal lives in the process, so replicas agree.
 */
@Injectable()
export class RateLimitStore implements OnApplicationShutdown {
  private readonly log = rootLogger().child({ component: 'rate-limit' });
  private readonly limiters = new Map<string, RateLimiterAbstract>();
  private redis?: Redis;
  private connecting?: Promise<void>;

  constructor(
    @Inject(ORDO_CONFIG) private readonly config: OrdoConfig,
    private readonly db: Database,
  ) {}

  /** Which store holds the counters. */
  get kind(): 'postgres' | 'redis' {
    return this.config.REDIS_URL ? 'redis' : 'postgres';
  }

  /**
   * Takes `points` from `key`'s window. Refused points stay counted in the window (a client over
   * its rate keeps being refused until the window closes); see giveBack.
   */
  async take(key: string, points: number, w: Window): Promise<WindowState> {
    const limiter = await this.limiter(w);
    try {
      const r = await limiter.consume(key, points);
      return state(w, r, true);
    } catch (e) {
      if (e instanceof RateLimiterRes) return state(w, e, false);
      throw new RateLimitStoreUnavailable(e);
    }
  }

  /**
   * Returns `points` taken from `key`'s window, if that window is still open at `before` (epoch ms):
   * returning them to a window that closed meanwhile would open the next one below zero.
   */
  async giveBack(key: string, points: number, w: Window, before: number): Promise<void> {
    if (points <= 0 || Date.now() >= before) return;
    const limiter = await this.limiter(w);
    try {
      await limiter.reward(key, points);
    } catch (e) {
      // Points not returned only make the window stricter.
      this.log.warn({ err: e }, 'rate limiter: could not return points');
    }
  }

  async onApplicationShutdown(): Promise<void> {
    this.redis?.disconnect();
    this.redis = undefined;
  }

  private async limiter(w: Window): Promise<RateLimiterAbstract> {
    const id = `${w.limit}/${w.windowSeconds}`;
    let l = this.limiters.get(id);
    if (!l) {
      const common = { keyPrefix: this.config.ORDO_RATE_LIMIT_KEY_PREFIX, points: w.limit, duration: w.windowSeconds };
      l = this.config.REDIS_URL
        ? new RateLimiterRedis({ ...common, storeClient: this.redisClient(), rejectIfRedisNotReady: true })
        : new RateLimiterPostgres({
            ...common,
            storeClient: this.db.systemPool,
            storeType: 'pool',
            tableName: TABLE,
            tableCreated: true,
            // Expired rows are deleted by the scheduler role's sweep (LimitRetention).
            clearExpiredByTimeout: false,
          });
      this.limiters.set(id, l);
    }
    if (this.connecting) await this.connecting;
    return l;
  }

  /** One Redis connection per process, opened on first use; reconnects on its own after a loss. */
  private redisClient(): Redis {
    if (!this.redis) {
      const r = new Redis(this.config.REDIS_URL!, {
        lazyConnect: true,
        // A command while disconnected fails at once: the limiter fails closed rather than waits.
        enableOfflineQueue: false,
        maxRetriesPerRequest: 1,
        commandTimeout: REDIS_COMMAND_TIMEOUT_MS,
        connectTimeout: REDIS_COMMAND_TIMEOUT_MS,
      });
      r.on('error', (e) => this.log.warn({ err: e }, 'rate limiter: redis error'));
      this.redis = r;
      this.connecting = r
        .connect()
        .catch((e: unknown) => this.log.warn({ err: e }, 'rate limiter: redis unavailable'))
        .finally(() => (this.connecting = undefined));
    }
    return this.redis;
  }
}

function state(w: Window, r: RateLimiterRes, allowed: boolean): WindowState {
  return {
    ...w,
    allowed,
    remaining: allowed ? Math.max(0, w.limit - r.consumedPoints) : 0,
    msBeforeReset: Math.max(0, r.msBeforeNext),
  };
}
