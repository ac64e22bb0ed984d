import { z } from 'zod';
import { queryInt } from '../../core/http/query-int';
import { DAG_ID } from '../dags/dag-definition';

export const CATCH_UP = ['none', 'latest', 'all'] as const;
export const OVERLAP = ['allow', 'skip', 'queue', 'cancel-previous'] as const;

const cron = z.string().min(1).max(200).describe('5 fields (minute hour dom month dow) or 6 (seconds first)');
const timezone = z.string().min(1).max(64).describe('IANA time zone, e.g. Europe/Berlin or UTC');
const inputs = z.record(z.string(), z.unknown());

export const createScheduleBody = z
  .strictObject({
    dagId: z.string().regex(DAG_ID, 'a DAG id'),
    version: z
      .number()
      .int()
      .min(1)
      .max(2_147_483_647)
      .optional()
      .describe('Pinned DAG version; absent: the latest active version at each fire'),
    cron,
    timezone,
    inputs: inputs.default({}),
    catchUp: z.enum(CATCH_UP).default('none'),
    overlap: z.enum(OVERLAP).default('allow'),
    paused: z.boolean().default(false),
  })
  .meta({ id: 'CreateScheduleRequest' });

export const updateScheduleBody = z
  .strictObject({
    dagId: z.string().regex(DAG_ID, 'a DAG id').optional(),
    version: z
      .number()
      .int()
      .min(1)
      .max(2_147_483_647)
      .nullable()
      .optional()
      .describe('null: follow the latest active version'),
    cron: cron.optional(),
    timezone: timezone.optional(),
    inputs: inputs.optional(),
    catchUp: z.enum(CATCH_UP).optional(),
    overlap: z.enum(OVERLAP).optional(),
    paused: z.boolean().optional(),
  })
  .refine((b) => Object.keys(b).length > 0, 'names no field to change')
  .meta({ id: 'UpdateScheduleRequest' });

export const scheduleSchema = z
  .object({
    id: z.uuid(),
    dagId: z.string(),
    version: z.number().int().nullable(),
    cron: z.string(),
    timezone: z.string(),
    inputs,
    catchUp: z.enum(CATCH_UP),
    overlap: z.enum(OVERLAP),
    paused: z.boolean(),
    nextFireAt: z.iso.datetime().nullable().describe('The earliest fire time not yet handled'),
    queuedFireAt: z.iso.datetime().nullable(),
    lastFireAt: z.iso.datetime().nullable(),
    lastRunId: z.uuid().nullable(),
    createdBy: z.string(),
    createdAt: z.iso.datetime(),
    updatedAt: z.iso.datetime(),
  })
  .meta({ id: 'Schedule' });

export const scheduleParams = z.strictObject({ id: z.uuid() });

export const scheduleListQuery = z.strictObject({
  limit: queryInt(1, 500, 50),
  pageToken: z.string().max(500).optional(),
  dagId: z.string().regex(DAG_ID, 'a DAG id').optional(),
});
export const scheduleListSchema = z
  .object({ items: z.array(scheduleSchema), nextPageToken: z.string().nullable() })
  .meta({ id: 'ScheduleList' });

const count = queryInt(1, 100, 10);
export const nextQuery = z.strictObject({ count });
export const previewQuery = z.strictObject({ cron, timezone, count });

export const fireTimesSchema = z
  .object({
    cron: z.string(),
    timezone: z.string(),
    items: z.array(
      z.object({
        utc: z.iso.datetime(),
        local: z.string().describe('Local wall-clock time with its offset, e.g. 2026-03-29T03:00:00+02:00'),
      }),
    ),
  })
  .meta({ id: 'ScheduleFireTimes' });

export const fireListSchema = z
  .object({
    items: z.array(
      z.object({
        fireTime: z.iso.datetime(),
        runId: z.uuid().nullable(),
        outcome: z.enum(['created', 'skipped', 'queued', 'cancelled-previous', 'failed']),
        error: z.string().nullable(),
        firedAt: z.iso.datetime(),
      }),
    ),
  })
  .meta({ id: 'ScheduleFireList' });
export const fireListQuery = z.strictObject({ limit: queryInt(1, 500, 50) });

export type CreateScheduleBody = z.infer<typeof createScheduleBody>;
export type UpdateScheduleBody = z.infer<typeof updateScheduleBody>;
export type ScheduleDto = z.infer<typeof scheduleSchema>;
