import { z } from 'zod';
import { definePlugin, type JsonObject } from '../../src/modules/plugins/plugin';
import {
  DEFAULT_POOL,
  DISPATCH_STRATEGIES,
  parseSize,
  POOL_NAME,
  SIZE,
  SIZE_BOUND_MESSAGE,
  sizeWithinBound,
  TASK_TYPE,
} from '../../src/modules/workers/worker-names';

const TEMPLATE = /^\$\{\{.*\}\}$/s;
/** A size, or a template that renders to one. */
const size = z
  .string()
  .refine((s) => SIZE.test(s.trim()) || TEMPLATE.test(s), 'a size such as "16GiB" or ">=512MiB"')
  .refine(sizeWithinBound, SIZE_BOUND_MESSAGE);
const SECRET_REF = /\$\{\{[^}]*\bsecrets\./;

const config = z
  .strictObject({
    /** The task type a worker must handle (`resize-image`). */
    taskType: z.string().regex(TASK_TYPE, 'a task type: letters, digits, ".", "_", ":" or "-", up to 100'),
    /** The worker pool (default `default`). */
    pool: z.string().regex(POOL_NAME, 'a pool name: lowercase letters, digits, "-" and "_", up to 63').optional(),
    /** The task's inputs, templated from the run's inputs and upstream outputs. */
    inputs: z.record(z.string(), z.unknown()).optional(),
    /** What the worker must have: gpus, vram, cpus, memory, installed models, labels. */
    requires: z
      .strictObject({
        gpu: z.number().int().min(0).max(1024).optional(),
        vram: size.optional(),
        cpu: z.number().positive().max(100_000).optional(),
        memory: size.optional(),
        models: z.array(z.string().min(1).max(200)).max(100).optional(),
        labels: z.record(z.string().min(1).max(100), z.string().max(200)).optional(),
      })
      .optional(),
    /** How a worker is chosen among those that can take the task (default: the pool's strategy). */
    strategy: z.enum(DISPATCH_STRATEGIES).optional(),
    /** The inputs may carry secrets (`${{ secrets.NAME }}`): they reach the worker, sealed at rest. */
    allowSecrets: z.boolean().optional(),
  })
  .refine((c) => c.allowSecrets === true || !SECRET_REF.test(JSON.stringify(c.inputs ?? {})), {
    message: 'the inputs reference secrets: set allowSecrets: true to hand secrets to external workers',
    path: ['allowSecrets'],
  });

type QueueConfig = z.infer<typeof config>;

/** The requirements as the dispatcher compares them (sizes in bytes). */
function requirements(r: QueueConfig['requires']): JsonObject {
  if (!r) return {};
  return {
    ...(r.gpu !== undefined ? { gpu: r.gpu } : {}),
    ...(r.vram !== undefined ? { vram: r.vram, vramBytes: parseSize(r.vram) } : {}),
    ...(r.cpu !== undefined ? { cpu: r.cpu } : {}),
    ...(r.memory !== undefined ? { memory: r.memory, memoryBytes: parseSize(r.memory) } : {}),
    ...(r.models !== undefined ? { models: r.models } : {}),
    ...(r.labels !== undefined ? { labels: r.labels } : {}),
  };
}

/**
 * Hands the step to an external worker of its tenant (pull model, see docs/workers.md): the step
 * waits, holding no slot and no lease, while its task goes to a worker of the pool that handles
 * the task type and meets the requirements, chosen by the strategy; the worker's result ends it
 * (outputs checked against the worker's declared output schema). No matching worker: the step
 * waits, bounded by its dispatchTimeout; the run's record says why.
 */
export default definePlugin({
  name: 'queue',
  description: 'Dispatches the step as a task to an external worker of the tenant (pool, task type, requirements).',
  configSchema: config,
  waitFor: (cfg) => ({
    kind: 'queue',
    taskType: cfg.taskType,
    pool: cfg.pool ?? DEFAULT_POOL,
    ...(cfg.strategy !== undefined ? { strategy: cfg.strategy } : {}),
  }),
  waitData: (cfg) => ({
    taskType: cfg.taskType,
    pool: cfg.pool ?? DEFAULT_POOL,
    ...(cfg.strategy !== undefined ? { strategy: cfg.strategy } : {}),
    requires: requirements(cfg.requires),
    inputs: (cfg.inputs ?? {}) as JsonObject,
    secretsAllowed: cfg.allowSecrets === true,
  }),
  // A queue step is ended by its worker's result, never run here (the worker asks waitFor instead).
  execute: () =>
    Promise.resolve({
      status: 'failed' as const,
      error: { code: 'QUEUE_NOT_RUNNABLE', message: 'a queue step runs on an external worker', retryable: false },
    }),
});
