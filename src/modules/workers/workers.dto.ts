import { z } from 'zod';
import { queryInt } from '../../core/http/query-int';
import {
  DISPATCH_STRATEGIES,
  ERROR_CLASSES,
  POOL_NAME,
  SIZE,
  SIZE_BOUND_MESSAGE,
  sizeWithinBound,
  TASK_TYPE,
  WORKER_NAME,
} from './worker-names';

const size = z.string().regex(SIZE, 'a size such as "16GiB" or "512MiB"').refine(sizeWithinBound, SIZE_BOUND_MESSAGE);
const jsonSchema = z
  .record(z.string(), z.unknown())
  .describe('a JSON Schema (draft 2020-12 or 7) object; 64 KiB at most as JSON');

export const taskTypeSchema = z.strictObject({
  name: z.string().regex(TASK_TYPE, 'a task type: letters, digits, ".", "_", ":" or "-", up to 100'),
  inputSchema: jsonSchema.optional().describe('what the task inputs must match (checked before a task is handed over)'),
  outputSchema: jsonSchema
    .optional()
    .describe('what the outputs must match (a mismatch fails the step: CONTRACT_VIOLATION)'),
});

export const registerWorkerBody = z
  .strictObject({
    name: z
      .string()
      .regex(WORKER_NAME, 'printable ASCII without spaces, up to 200')
      .describe('the worker name its reputation is kept under (in its pool)'),
    pool: z
      .string()
      .regex(POOL_NAME, 'a pool name')
      .optional()
      .describe("the token's pool (the only one a worker token may name)"),
    taskTypes: z.array(taskTypeSchema).min(1).max(100),
    resources: z
      .strictObject({
        cpu: z.number().positive().max(100_000).optional(),
        memory: size.optional(),
        gpu: z
          .strictObject({
            count: z.number().int().min(0).max(1024),
            model: z.string().min(1).max(200).optional(),
            vram: size.optional().describe('per gpu'),
          })
          .optional(),
      })
      .optional(),
    models: z
      .array(z.string().min(1).max(200))
      .max(500)
      .optional()
      .describe('models or tools installed (free-form tags)'),
    maxConcurrent: z.number().int().min(1).max(10_000).default(1),
    costPerSecond: z.number().min(0).max(1_000_000).default(0),
    labels: z.record(z.string().min(1).max(100), z.string().max(200)).optional(),
    sdkVersion: z.string().min(1).max(100).optional(),
  })
  .meta({ id: 'RegisterWorkerRequest' });

export const registeredWorkerSchema = z
  .object({
    workerId: z.uuid(),
    pool: z.string(),
    ttlMs: z.number().int().describe('missing heartbeats for this long marks the worker offline'),
    heartbeatIntervalMs: z.number().int(),
    longPollMs: z.number().int(),
  })
  .meta({ id: 'RegisteredWorker' });

export const workerParams = z.strictObject({ workerId: z.uuid() });
export const taskParams = z.strictObject({ workerId: z.uuid(), attemptId: z.uuid() });

export const heartbeatBody = z
  .strictObject({
    loaded: z
      .array(z.string().min(1).max(200))
      .max(500)
      .optional()
      .describe('models loaded now (warm): the default strategy prefers a worker that has them'),
  })
  .meta({ id: 'WorkerHeartbeat' });

export const cancelSchema = z.object({
  attemptId: z.uuid(),
  reason: z.string().describe('cancelled (the run was), step_ended (timeout, …), worker_lost'),
});

export const heartbeatAnswerSchema = z
  .object({
    status: z.enum(['online', 'draining', 'offline']).describe('offline: register again'),
    ttlMs: z.number().int(),
    cancel: z.array(cancelSchema).describe('tasks to stop'),
  })
  .meta({ id: 'WorkerHeartbeatAnswer' });

export const nextQuery = z.strictObject({
  waitMs: queryInt(0, 120_000).optional(),
  max: queryInt(1, 100, 1),
});

export const taskSchema = z
  .object({
    attemptId: z.uuid().describe('the task of this attempt: where its result goes'),
    runId: z.uuid(),
    stepId: z.string(),
    attempt: z.number().int(),
    epoch: z.number().int().describe('the fencing epoch its result must carry'),
    taskType: z.string(),
    inputs: z.unknown(),
    deadline: z.iso.datetime().describe('the step fails (TIMEOUT) if no result arrives by then'),
    traceparent: z.string(),
    dagId: z.string(),
    dagVersion: z.number().int(),
  })
  .meta({ id: 'WorkerTask' });

export const tasksSchema = z.object({ tasks: z.array(taskSchema) }).meta({ id: 'WorkerTasks' });

const logLine = z.strictObject({
  level: z.enum(['debug', 'info', 'warn', 'error']),
  message: z.string().max(8_192),
});

const succeededResult = z.strictObject({
  epoch: z.number().int().min(0),
  status: z.literal('succeeded'),
  outputs: z.record(z.string(), z.unknown()).optional(),
  namedStatus: z.string().min(1).max(100).optional(),
  logs: z.array(logLine).max(1_000).optional(),
});

const failedResult = z.strictObject({
  epoch: z.number().int().min(0),
  status: z.literal('failed'),
  error: z.strictObject({
    class: z.enum(ERROR_CLASSES),
    code: z.string().regex(/^[A-Z][A-Z0-9_]{0,63}$/, 'an upper-case code such as RESIZE_FAILED'),
    message: z.string().max(4_096),
  }),
  logs: z.array(logLine).max(1_000).optional(),
});

export const resultBody = z
  .discriminatedUnion('status', [succeededResult, failedResult])
  .meta({ id: 'WorkerTaskResult' });

/** Results one post carries at most. */
export const MAX_RESULTS_A_POST = 100;

const attemptId = { attemptId: z.uuid().describe('the task the result is for') };

export const resultsBody = z
  .strictObject({
    results: z
      .array(z.discriminatedUnion('status', [succeededResult.extend(attemptId), failedResult.extend(attemptId)]))
      .min(1)
      .max(MAX_RESULTS_A_POST)
      .refine((rs) => new Set(rs.map((r) => r.attemptId)).size === rs.length, {
        message: 'each task at most once a post',
      }),
  })
  .meta({ id: 'WorkerTaskResults' });

export const resultAnswerSchema = z
  .object({
    outcome: z.enum(['succeeded', 'failed']).describe("what the step's attempt ended as"),
    duplicate: z.boolean().describe('this result was posted before: nothing changed'),
    error: z.object({ code: z.string(), message: z.string() }).optional(),
  })
  .meta({ id: 'WorkerTaskResultAnswer' });

export const resultsAnswerSchema = z
  .object({
    results: z
      .array(
        z.union([
          z.object({ attemptId: z.uuid(), answer: resultAnswerSchema }),
          z.object({
            attemptId: z.uuid(),
            refused: z
              .object({ status: z.number().int(), code: z.string(), message: z.string() })
              .describe('the answer the result alone would have had (its status and error envelope): nothing changed'),
          }),
        ]),
      )
      .describe('one answer a result, in the order posted'),
  })
  .meta({ id: 'WorkerTaskResultsAnswer' });

export const progressBody = z
  .strictObject({
    epoch: z.number().int().min(0),
    percent: z.number().min(0).max(100).optional(),
    message: z.string().max(1_000).optional(),
    data: z.record(z.string(), z.unknown()).optional().describe('small: 4 KiB at most as JSON'),
  })
  .meta({ id: 'WorkerTaskProgress' });

export const syncBody = z
  .strictObject({
    holding: z
      .array(z.uuid())
      .max(10_000)
      .describe(
        'the attempts the worker runs or is posting results of: every other task delivered to it is delivered again',
      ),
  })
  .meta({ id: 'WorkerTaskSync' });

export const syncAnswerSchema = z
  .object({
    redelivered: z
      .array(z.uuid())
      .describe(
        'tasks delivered to the worker that it did not hold: assigned to it again, and pulled (or offered) again',
      ),
  })
  .meta({ id: 'WorkerTaskSyncAnswer' });

export const listWorkersQuery = z.strictObject({
  pool: z.string().regex(POOL_NAME).optional(),
  includeOffline: z
    .enum(['true', 'false'])
    .default('false')
    .transform((v) => v === 'true'),
  limit: queryInt(1, 500, 100),
  pageToken: z.string().max(500).optional(),
});

export const workerSchema = z
  .object({
    workerId: z.uuid(),
    name: z.string(),
    pool: z.string(),
    status: z.enum(['online', 'draining', 'offline']),
    taskTypes: z.array(z.string()),
    resources: z.object({
      cpu: z.number().nullable(),
      memoryBytes: z.number().nullable(),
      gpu: z.object({ count: z.number().int(), model: z.string().nullable(), vramBytes: z.number() }),
    }),
    models: z.array(z.string()),
    loaded: z.array(z.string()),
    labels: z.record(z.string(), z.string()),
    maxConcurrent: z.number().int(),
    held: z.number().int().describe('tasks assigned to it or running on it now'),
    costPerSecond: z.number(),
    sdkVersion: z.string().nullable(),
    registeredAt: z.iso.datetime(),
    lastSeenAt: z.iso.datetime(),
    offlineAt: z.iso.datetime().nullable(),
    reputation: z.object({
      score: z.number().describe('(successes + 1) / (successes + weighted failures + 2), decayed over time'),
      tasks: z.number().int(),
      violations: z.number().int(),
      timeouts: z.number().int(),
      blocked: z.boolean().describe('below the floor: no task until an operator resets it'),
    }),
  })
  .meta({ id: 'Worker' });

export const workerListSchema = z
  .object({ items: z.array(workerSchema), nextPageToken: z.string().nullable() })
  .meta({ id: 'WorkerList' });

export const drainAnswerSchema = z.object({ status: z.enum(['draining']) }).meta({ id: 'WorkerDrained' });

export const resetReputationBody = z
  .strictObject({ reason: z.string().min(1).max(500).describe('recorded with who reset it') })
  .meta({ id: 'ResetReputationRequest' });

export const poolParams = z.strictObject({ pool: z.string().regex(POOL_NAME, 'a pool name') });
export const poolBody = z.strictObject({ strategy: z.enum(DISPATCH_STRATEGIES) }).meta({ id: 'WorkerPoolSettings' });
export const poolSchema = z
  .object({ pool: z.string(), strategy: z.enum(DISPATCH_STRATEGIES) })
  .meta({ id: 'WorkerPool' });

export type RegisterWorkerBody = z.infer<typeof registerWorkerBody>;
export type ResultBody = z.infer<typeof resultBody>;
export type ResultsBody = z.infer<typeof resultsBody>;
export type ResultsAnswer = z.infer<typeof resultsAnswerSchema>;
export type ProgressBody = z.infer<typeof progressBody>;
export type SyncBody = z.infer<typeof syncBody>;
export type SyncAnswer = z.infer<typeof syncAnswerSchema>;
export type WorkerDto = z.infer<typeof workerSchema>;
export type TaskDto = z.infer<typeof taskSchema>;
export type HeartbeatAnswer = z.infer<typeof heartbeatAnswerSchema>;
export type ResultAnswer = z.infer<typeof resultAnswerSchema>;
