import { z } from 'zod';
import { queryInt } from '../../core/http/query-int';
import { STEP_ID } from '../dags/dag-definition';

export const DEAD_LETTER_STATES = ['open', 'requeued', 'discarded'] as const;
export const ERROR_CLASSES = ['transient', 'permanent', 'invalid_input'] as const;

export const deadLetterParams = z.strictObject({ runId: z.uuid() });

export const deadLetterListQuery = z.strictObject({
  state: z.enum(DEAD_LETTER_STATES).default('open').describe('entries in this state (open: not yet acted on)'),
  limit: queryInt(1, 500, 50),
  pageToken: z.string().max(500).optional(),
});
export type DeadLetterListQuery = z.infer<typeof deadLetterListQuery>;

export const requeueBody = z
  .strictObject({
    fromStep: z
      .string()
      .regex(STEP_ID, 'a step id')
      .optional()
      .describe('the step to rerun from; by default the run’s first failed step (topological order)'),
  })
  .meta({ id: 'DeadLetterRequeueRequest' });

export const deadLetterSchema = z
  .object({
    runId: z.uuid(),
    dagId: z.string(),
    version: z.number().int(),
    state: z.enum(DEAD_LETTER_STATES),
    enteredUtc: z.iso.datetime(),
    resolvedUtc: z.iso.datetime().nullable(),
    resolvedBy: z.string().nullable().describe('the subject of the token that requeued or discarded it'),
    requeuedRunId: z.uuid().nullable().describe('the rerun a requeue started'),
  })
  .meta({ id: 'DeadLetterEntry' });
export type DeadLetterDto = z.infer<typeof deadLetterSchema>;

export const deadLetterListSchema = z
  .object({ items: z.array(deadLetterSchema), nextPageToken: z.string().nullable() })
  .meta({ id: 'DeadLetterList' });

export const stepErrorSchema = z
  .object({
    class: z.enum(ERROR_CLASSES),
    code: z.string(),
    message: z.string(),
    retryable: z.boolean(),
    input: z.string().optional().describe('for invalid_input: the input at fault'),
  })
  .meta({ id: 'StepError' });
export type StepErrorDto = z.infer<typeof stepErrorSchema>;

export const deadLetterDetailSchema = deadLetterSchema
  .extend({
    failedSteps: z.array(
      z.object({
        stepId: z.string(),
        attempts: z.number().int(),
        error: stepErrorSchema.nullable(),
        attemptErrors: z
          .array(z.object({ attempt: z.number().int(), status: z.string(), error: stepErrorSchema.nullable() }))
          .describe('each attempt of the step, in order, with its error'),
      }),
    ),
  })
  .meta({ id: 'DeadLetterDetail' });

export const requeuedSchema = deadLetterSchema
  .extend({ fromStep: z.string(), newRun: z.object({ runId: z.uuid(), status: z.string(), traceId: z.string() }) })
  .meta({ id: 'DeadLetterRequeued' });
