import { z } from 'zod';
import { LIMIT_NAMES, limitOverridesSchema, planLimitsSchema, type LimitName } from './plan-limits';

export const planIdSchema = z
  .string()
  .regex(
    /^[a-z0-9][a-z0-9._-]{0,62}$/,
    'lowercase letters, digits, dots, dashes and underscores, at most 63, starting with a letter or digit',
  );

/** Why an operator made a change: recorded in the operator audit log. */
const reasonSchema = z.string().trim().min(1).max(500);

/**
 * An IANA time zone name (e.g. Europe/Paris), as the runtime's time zone database knows it. Offsets
 * (+02:00) and POSIX strings are refused: the quota period follows a named zone's calendar.
 */
export const timeZoneSchema = z
  .string()
  .max(64)
  .refine((v) => /^[A-Za-z][A-Za-z0-9_+\-/]*$/.test(v) && canonicalTimeZone(v) !== undefined, {
    message: 'an IANA time zone name, e.g. Europe/Paris or UTC',
  });

/** The zone's canonical spelling (Intl's), or undefined when the runtime does not know it. */
export function canonicalTimeZone(name: string): string | undefined {
  try {
    return new Intl.DateTimeFormat('en-US', { timeZone: name }).resolvedOptions().timeZone;
  } catch {
    return undefined;
  }
}

export const createPlanBody = z
  .strictObject({
    id: planIdSchema,
    description: z.string().max(500).optional(),
    limits: planLimitsSchema,
  })
  .meta({ id: 'CreatePlanRequest' });

export const updatePlanBody = z
  .strictObject({
    description: z.string().max(500).optional(),
    /** Replaces the plan's limits as a whole. */
    limits: planLimitsSchema,
    reason: reasonSchema.optional(),
  })
  .meta({ id: 'UpdatePlanRequest' });

export const assignPlanBody = z
  .strictObject({
    planId: planIdSchema,
    timeZone: timeZoneSchema.optional().describe('The zone whose calendar months bound the monthly run quota'),
    reason: reasonSchema.optional(),
  })
  .meta({ id: 'AssignPlanRequest' });

export const setOverridesBody = z
  .strictObject({
    overrides: limitOverridesSchema.describe(
      "Replaces the tenant's overrides as a whole; a limit set to null lifts the plan's limit for this tenant",
    ),
    reason: reasonSchema,
  })
  .meta({ id: 'SetLimitOverridesRequest' });

export const resetUsageBody = z.strictObject({ reason: reasonSchema }).meta({ id: 'ResetUsageRequest' });

export const planParams = z.strictObject({ planId: planIdSchema });

/** Effective limits as answered: only the limits that apply (no key: not limited). */
export const limitsSchema = z
  .strictObject(
    Object.fromEntries(LIMIT_NAMES.map((k) => [k, z.number().int().optional()])) as Record<
      LimitName,
      z.ZodOptional<z.ZodNumber>
    >,
  )
  .meta({ id: 'Limits' });

export const planSchema = z
  .object({
    id: z.string(),
    description: z.string(),
    limits: limitsSchema,
    tenants: z.number().int().describe('Tenants on the plan'),
    createdAt: z.iso.datetime(),
    updatedAt: z.iso.datetime(),
  })
  .meta({ id: 'Plan' });

export const planListSchema = z.object({ items: z.array(planSchema) }).meta({ id: 'PlanList' });

export const tenantPlanSchema = z
  .object({
    tenantId: z.string(),
    planId: z.string(),
    timeZone: z.string(),
    overrides: z.record(z.string(), z.number().int().nullable()),
    limits: limitsSchema.describe("The plan's limits with the overrides applied"),
    updatedAt: z.iso.datetime(),
  })
  .meta({ id: 'TenantPlan' });

export const usageSchema = z
  .object({
    plan: z.string().nullable().describe("The tenant's plan; null: no plan (the instance's settings apply)"),
    limits: limitsSchema,
    usage: z.object({
      runsThisPeriod: z.number().int().describe('Runs created in the current period (top-level runs)'),
      concurrentRuns: z.number().int().describe('Top-level runs scheduled, queued or running'),
      queuedSteps: z.number().int().describe('Steps ready and waiting for a worker'),
      stepsInFlight: z.number().int().describe('Steps claimed by workers'),
      artifactBytes: z.number().int().describe('Bytes of artifacts (step outputs and logs) stored'),
    }),
    period: z.object({
      start: z.iso.datetime(),
      resetsAt: z.iso.datetime(),
      timeZone: z.string(),
    }),
  })
  .meta({ id: 'Usage' });

export type CreatePlanBody = z.infer<typeof createPlanBody>;
export type UpdatePlanBody = z.infer<typeof updatePlanBody>;
export type AssignPlanBody = z.infer<typeof assignPlanBody>;
export type SetOverridesBody = z.infer<typeof setOverridesBody>;
export type ResetUsageBody = z.infer<typeof resetUsageBody>;
export type PlanDto = z.infer<typeof planSchema>;
export type TenantPlanDto = z.infer<typeof tenantPlanSchema>;
export type UsageDto = z.infer<typeof usageSchema>;
