import { z } from 'zod';
import { queryInt } from '../../core/http/query-int';
import { DAG_ID, STEP_ID } from '../dags/dag-definition';
import { runWaitingSchema } from './run-explain.dto';
import { RUN_STATES, STEP_STATES } from './state-machine';

const sha256 = z.string().regex(/^[0-9a-f]{64}$/);

export const createRunBody = z
  .strictObject({
    dagId: z.string().regex(DAG_ID, 'a DAG id'),
    version: z.number().int().min(1).max(2_147_483_647).optional(),
    inputs: z.record(z.string(), z.unknown()).default({}),
    runToken: z.string().min(1).max(200),
    priority: z
      .number()
      .int()
      .min(0)
      .max(9)
      .optional()
      .describe("the run's place in the tenant's ready queue: 0-9, higher first (5 when absent)"),
    notBefore: z.iso
      .datetime({ offset: true })
      .optional()
      .describe(
        'RFC 3339: the run waits, status scheduled, until then (at most a year ahead); now or past starts it at once',
      ),
  })
  .meta({ id: 'CreateRunRequest' });
export type CreateRunBody = z.infer<typeof createRunBody>;

export const runParams = z.strictObject({ runId: z.uuid() });
/** A step of a run: a step id, or a map instance's (`resize[17]`). */
const RUN_STEP_ID = new RegExp(`${STEP_ID.source.slice(0, -1)}(\\[\\d{1,5}\\])?$`);
export const stepParams = z.strictObject({
  runId: z.uuid(),
  stepId: z.string().regex(RUN_STEP_ID, 'a step id, or a map instance id like resize[17]'),
});

export const runListQuery = z.strictObject({
  dagId: z.string().regex(DAG_ID, 'a DAG id').optional(),
  status: z.enum(RUN_STATES).optional(),
  from: z.iso.datetime({ offset: true }).optional(),
  to: z.iso.datetime({ offset: true }).optional(),
  limit: queryInt(1, 500, 50),
  pageToken: z.string().max(500).optional(),
});
export type RunListQuery = z.infer<typeof runListQuery>;

export const eventsQuery = z.strictObject({
  after: queryInt(0, 2_147_483_647, 0),
  limit: queryInt(1, 1000, 100),
});

export const rerunBody = z
  .strictObject({ fromStep: z.string().regex(STEP_ID, 'a step id') })
  .meta({ id: 'RerunRequest' });

export const createdRunSchema = z
  .object({ runId: z.uuid(), created: z.boolean(), status: z.enum(RUN_STATES), traceId: z.string() })
  .meta({ id: 'CreatedRun' });

export const runSchema = z
  .object({
    runId: z.uuid(),
    dagId: z.string(),
    version: z.number().int(),
    contentHash: sha256,
    status: z.enum(RUN_STATES),
    reason: z.string().nullable(),
    traceId: z.string(),
    runToken: z.string(),
    inputs: z.unknown(),
    inputsHash: sha256,
    outputsHash: sha256.nullable(),
    requestedBy: z.string(),
    replayOf: z.uuid().nullable(),
    rerunOf: z.uuid().nullable(),
    rerunFromStep: z.string().nullable(),
    priority: z.number().int().describe("the run's priority in the tenant's ready queue (0-9, higher first)"),
    notBefore: z.iso
      .datetime()
      .nullable()
      .describe('the time the run was created to wait for (status scheduled until then)'),
    parentRunId: z.uuid().nullable().describe('the run whose `dag` step started this run (null: not a child run)'),
    parentStepId: z.string().nullable().describe('the `dag` step of the parent run that started this run'),
    depth: z.number().int().describe('how many parent runs this run has (0: not a child run)'),
    startedUtc: z.iso.datetime(),
    dispatchedUtc: z.iso.datetime().nullable(),
    finishedUtc: z.iso.datetime().nullable(),
    stepsTotal: z.number().int(),
    stepsRemaining: z.number().int(),
    lastEventSeq: z.number().int(),
    lastEventHash: z.string(),
  })
  .meta({ id: 'Run' });

export const stepSchema = z
  .object({
    stepId: z.string(),
    status: z.enum(STEP_STATES),
    reason: z.string().nullable(),
    plugin: z.string(),
    dependsOn: z.array(z.string()),
    topoIndex: z.number().int(),
    dispatchSeq: z.number().int().nullable(),
    attempts: z.number().int(),
    namedStatus: z
      .string()
      .nullable()
      .describe('the named status it succeeded with, when its definition declares statuses'),
    outputs: z.unknown().nullable(),
    outputsHash: sha256.nullable(),
    logsHash: sha256.nullable(),
    error: z.unknown().nullable(),
    fromRerun: z.boolean(),
    queuedUtc: z.iso.datetime().nullable(),
    startedUtc: z.iso.datetime().nullable(),
    finishedUtc: z.iso.datetime().nullable(),
    childRunId: z.uuid().optional().describe('the child run a `dag` step started'),
    task: z
      .object({
        attemptId: z.uuid(),
        status: z.enum(['pending', 'assigned', 'delivered', 'succeeded', 'failed', 'cancelled', 'orphaned']),
        pool: z.string(),
        taskType: z.string(),
        waitReason: z
          .string()
          .nullable()
          .describe('why a pending task has no worker yet: no_matching_worker, workers_busy'),
        worker: z.object({ workerId: z.uuid(), name: z.string() }).nullable(),
        progress: z.unknown().nullable().describe('the latest progress its worker reported'),
      })
      .optional()
      .describe("a `queue` step's latest task (its external worker)"),
  })
  .meta({ id: 'Step' });

export const runDetailSchema = runSchema
  .extend({ steps: z.array(stepSchema), waiting: runWaitingSchema })
  .meta({ id: 'RunDetail' });
export const runListSchema = z
  .object({ items: z.array(runSchema), nextPageToken: z.string().nullable() })
  .meta({ id: 'RunList' });

export const attemptSchema = z
  .object({
    attempt: z.number().int(),
    status: z.string(),
    workerId: z.string(),
    epoch: z.number().int(),
    traceparent: z.string(),
    leaseExpiresUtc: z.iso.datetime(),
    queuedUtc: z.iso.datetime().nullable(),
    claimedUtc: z.iso.datetime(),
    /** When its ConditionPending phase began: its preconditions did not hold and it waited (it ends at constraintCheckedUtc). */
    conditionPendingUtc: z.iso.datetime().nullable(),
    constraintCheckedUtc: z.iso.datetime().nullable(),
    startedUtc: z.iso.datetime().nullable(),
    finishedUtc: z.iso.datetime().nullable(),
    terminatedUtc: z.iso.datetime().nullable(),
    error: z.unknown().nullable(),
    outputsHash: sha256.nullable(),
    logsHash: sha256.nullable(),
  })
  .meta({ id: 'Attempt' });
export const attemptListSchema = z.object({ items: z.array(attemptSchema) }).meta({ id: 'AttemptList' });
export const runAttemptListSchema = z
  .object({ items: z.array(attemptSchema.extend({ stepId: z.string() }).meta({ id: 'RunAttempt' })) })
  .meta({ id: 'RunAttemptList' });

export const eventSchema = z
  .object({
    seq: z.number().int(),
    createdUtc: z.iso.datetime(),
    type: z.string(),
    stepId: z.string().nullable(),
    attempt: z.number().int().nullable(),
    actor: z.string(),
    data: z.unknown(),
    prevHash: z.string(),
    hash: sha256,
  })
  .meta({ id: 'RunEvent' });
export const eventListSchema = z
  .object({ items: z.array(eventSchema), nextAfter: z.number().int().nullable() })
  .meta({ id: 'RunEventList' });

export type RunDto = z.infer<typeof runSchema>;
export type StepDto = z.infer<typeof stepSchema>;
export type AttemptDto = z.infer<typeof attemptSchema>;
