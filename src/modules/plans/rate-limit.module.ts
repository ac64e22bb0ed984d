import { Module } from '@nestjs/common';
import { APP_GUARD, APP_INTERCEPTOR } from '@nestjs/core';
import { LimitHits } from './limit-hits';
import { LimitHitsRepository } from './limit-hits.repository';
import { LimitRetention } from './limit-hits-retention';
import { PlansCoreModule } from './plans.module';
import { RateLimitStore } from './rate-limit-store';
import { RunRateLimit } from './rate-limit-runs';
import { RequestRateLimitGuard } from './rate-limit.guard';
import { RateLimitInterceptor } from './rate-limit.interceptor';

/**
 * The rate limiter's store, the runsPerMinute bucket that run creation goes through (in every role
 * that creates runs), the limit hits recorder and the scheduler role's retention of their tables.
 */
@Module({
  imports: [PlansCoreModule],
  providers: [RateLimitStore, RunRateLimit, LimitHits, LimitHitsRepository, LimitRetention],
  exports: [PlansCoreModule, RateLimitStore, RunRateLimit, LimitHits],
})
export class RateLimitCoreModule {}

/**
 * The api role's request limits: a global guard after authentication (its module comes after the
 * auth module in the api role, and Nest runs global guards in registration order), and the
 * interceptor that adds the run bucket's RateLimit fields to successes and counts limit refusals.
 */
@Module({
  imports: [RateLimitCoreModule],
  providers: [
    { provide: APP_GUARD, useClass: RequestRateLimitGuard },
    { provide: APP_INTERCEPTOR, useClass: RateLimitInterceptor },
  ],
})
export class RateLimitModule {}
