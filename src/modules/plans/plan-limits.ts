import { z } from 'zod';

/**
 * The limits a plan can set, their units and bounds: the one home of their shape. A limit absent
 * from a plan is not limited by the plan. Overrides use the same keys; an override of `null` lifts
 * the plan's limit for that tenant.
 */
const count = (max: number) => z.number().int().min(1).max(max);

export const limitShape = {
  /** Runs created per minute (a token bucket refilled at this rate). */
  runsPerMinute: count(1_000_000),
  /** The bucket's size: runs that may be created at once (default: runsPerMinute). */
  runsBurst: count(1_000_000),
  /** API requests per second per token. */
  requestsPerSecondPerToken: count(100_000),
  /** API requests per second per tenant (all its tokens). */
  requestsPerSecondPerTenant: count(100_000),
  /** Steps queued (ready or waiting for a slot) at once. */
  maxQueuedSteps: count(1_000_000_000),
  /** Runs not yet ended at once. */
  maxConcurrentRuns: count(10_000_000),
  /** Steps in flight (claimed by workers) at once: the engine's per-tenant cap. */
  maxStepsInFlight: count(100_000),
  /** Fair-share weight in the engine's weighted round-robin (1: the default). */
  weight: count(1_000),
  /** Runs created per calendar month in the tenant's time zone. */
  monthlyRuns: z.number().int().min(0).max(1_000_000_000_000),
  /** Bytes of artifacts stored. */
  maxArtifactBytes: z.number().int().min(0).max(1_000_000_000_000_000),
  /** Bytes of one export. */
  maxExportBytes: z.number().int().min(1).max(1_000_000_000_000_000),
  /** Days a finished run is kept before retention removes it (absent: ORDO_RETENTION_DAYS). */
  retentionDays: count(36_500),
} as const;

export type LimitName = keyof typeof limitShape;
export const LIMIT_NAMES = Object.keys(limitShape) as LimitName[];

export const planLimitsSchema = z.object(limitShape).partial().strict();
export type PlanLimits = z.infer<typeof planLimitsSchema>;

export const limitOverridesSchema = z
  .object(
    Object.fromEntries(LIMIT_NAMES.map((k) => [k, limitShape[k].nullable()])) as {
      [K in LimitName]: z.ZodNullable<(typeof limitShape)[K]>;
    },
  )
  .partial()
  .strict();
export type LimitOverrides = z.infer<typeof limitOverridesSchema>;

/** Effective limits (plan with overrides applied): a null or absent value is no limit. */
export type EffectiveLimits = { [K in LimitName]?: number | null };
