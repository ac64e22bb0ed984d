import { z } from 'zod';
import { queryInt } from '../../core/http/query-int';
import { tenantIdSchema } from '../tenants/tenants.dto';

export const queuesQuery = z.strictObject({
  tenantId: tenantIdSchema.optional().describe('Only this tenant'),
  limit: queryInt(1, 200, 50),
  pageToken: z.string().max(500).optional(),
});
export type QueuesQuery = z.infer<typeof queuesQuery>;

const limitValue = z.number().nullable();

export const tenantQueueSchema = z
  .object({
    tenantId: z.string(),
    plan: z
      .object({
        id: z.string(),
        limits: z.record(z.string(), limitValue).describe("The plan's limits with the tenant's overrides (null: none)"),
      })
      .nullable()
      .describe('null: the tenant has no plan (the instance settings apply)'),
    steps: z.object({
      ready: z.number().int().describe('Queued for a worker (ready queue items): what maxQueuedSteps counts'),
      waiting: z
        .number()
        .int()
        .describe(
          'Held outside the queue: waiting for an approval, a signal, an external worker, a child run, preconditions, or a retry backoff',
        ),
      inFlight: z.number().int().describe('Claimed by a worker (leased queue items)'),
    }),
    inFlightCap: z
      .number()
      .int()
      .describe("The engine's cap of steps in flight: the plan's maxStepsInFlight, else ORDO_TENANT_MAX_IN_FLIGHT"),
    sharedInFlightCap: z
      .number()
      .int()
      .nullable()
      .describe(
        'The cap while tenants share a worker (ORDO_TENANT_SHARED_IN_FLIGHT × weight, at most inFlightCap); null: none',
      ),
    oldestReadySeconds: z.number().nullable().describe('Age of the first ready item in queue order; null when none'),
    claimsPerSecond: z.number().describe('Attempts begun per second over the last claimsWindowSeconds'),
    limitHits: z
      .array(z.object({ limit: z.string(), hits: z.number().int() }))
      .describe('Refusals by limit since limitHitsSince, most first'),
  })
  .meta({ id: 'TenantQueue' });

export const queuesSchema = z
  .object({
    at: z.iso.datetime().describe("The database's time of the reading"),
    claimsWindowSeconds: z.number().int(),
    limitHitsSince: z.iso.datetime().describe('The start of the previous whole minute'),
    items: z.array(tenantQueueSchema),
    nextPageToken: z.string().nullable(),
  })
  .meta({ id: 'TenantQueues' });
export type QueuesDto = z.infer<typeof queuesSchema>;

export const auditQuery = z.strictObject({
  tenantId: tenantIdSchema.optional().describe('Only entries about this tenant'),
  limit: queryInt(1, 500, 100),
  pageToken: z.string().max(500).optional(),
});
export type AuditQuery = z.infer<typeof auditQuery>;

export const auditEntrySchema = z
  .object({
    seq: z.number().int(),
    at: z.iso.datetime(),
    actor: z.string(),
    tokenJti: z.string(),
    action: z.string(),
    tenantId: z.string().nullable(),
    planId: z.string().nullable(),
    reason: z.string().nullable(),
    detail: z.record(z.string(), z.unknown()),
    prevHash: z.string(),
    hash: z.string(),
  })
  .meta({ id: 'OperatorAuditEntry' });

export const auditPageSchema = z
  .object({ items: z.array(auditEntrySchema), nextPageToken: z.string().nullable() })
  .meta({ id: 'OperatorAuditPage' });

const seqParam = queryInt(1, Number.MAX_SAFE_INTEGER);

export const auditExportQuery = z.strictObject({
  tenantId: tenantIdSchema.optional().describe('Only entries about this tenant'),
  fromSeq: seqParam.optional().describe('First entry (default: the first)'),
  toSeq: seqParam.optional().describe('Last entry (default: the last at the start of the export)'),
});
export type AuditExportQuery = z.infer<typeof auditExportQuery>;
