import { z } from 'zod';
import { RUN_STATES, STEP_STATES } from './state-machine';

/**
 * Why an unfinished step is not running: a stable reason code and its details, one shape per
 * reason (computed by db/functions/ordo_run_explain.sql; docs/engine.md lists them).
 */
const base = { stepId: z.string(), status: z.enum(STEP_STATES) };
const utc = z.iso.datetime();

export const STEP_WAIT_REASONS = [
  'dependencies',
  'scheduled',
  'max_concurrent_runs',
  'tenant_in_flight_cap',
  'plan_limit',
  'concurrency_gate',
  'ready',
  'running',
  'backoff',
  'approval',
  'signal',
  'child_run',
  'map_instances',
  'condition_pending',
  'no_matching_worker',
  'workers_busy',
  'pending',
  'queued',
  'waiting',
  'retrying',
  'orphaned',
] as const;
export type StepWaitReason = (typeof STEP_WAIT_REASONS)[number];

const reasons = [
  z.object({
    ...base,
    reason: z.literal('dependencies'),
    waitingOn: z.array(z.string()).describe('its dependencies that have not ended, in topological order'),
    trigger: z.string().optional().describe('its trigger rule, when not all_success'),
  }),
  z.object({ ...base, reason: z.literal('scheduled'), at: utc.describe("the run's notBefore: when it starts") }),
  z.object({
    ...base,
    reason: z.literal('max_concurrent_runs'),
    limit: z.number().int().describe("the DAG's maxConcurrentRuns limit"),
    running: z.number().int().describe('runs of the DAG that count against it'),
    runsAhead: z.number().int().describe('runs of the DAG waiting for a slot that are admitted first'),
  }),
  z.object({
    ...base,
    reason: z.literal('tenant_in_flight_cap'),
    inFlight: z.number().int().describe("the tenant's steps in flight (leased)"),
    cap: z.number().int().describe('the cap the claim applies'),
    shared: z
      .boolean()
      .describe('the cap is the shared one (ORDO_TENANT_SHARED_IN_FLIGHT times the weight): other tenants have work'),
  }),
  z.object({
    ...base,
    reason: z.literal('plan_limit'),
    limit: z.enum(['maxStepsInFlight']).describe("the tenant's plan limit that holds the step"),
    inFlight: z.number().int().describe("the tenant's steps in flight (leased)"),
    cap: z.number().int().describe("the plan's cap"),
  }),
  z.object({
    ...base,
    reason: z.literal('concurrency_gate'),
    gate: z.string().describe('`<dagId>/<stepId>` for a step `concurrency`, `map/<runId>/<stepId>` for `maxParallel`'),
    limit: z.number().int(),
    running: z.number().int().describe("the gate's steps in flight"),
  }),
  z.object({
    ...base,
    reason: z.literal('ready'),
    ahead: z
      .number()
      .int()
      .optional()
      .describe("the tenant's ready steps the claim takes before it, counted up to 1,000 (absent under a gate)"),
  }),
  z.object({
    ...base,
    reason: z.literal('running'),
    worker: z.string().optional().describe('the engine worker holding its lease, or the external worker by name'),
    leaseExpiresAt: utc.optional().describe("when its lease ends unless the worker renews it (the engine's steps)"),
    workerId: z.uuid().optional().describe("the external worker's id (a queue step)"),
    pool: z.string().optional(),
    taskType: z.string().optional(),
  }),
  z.object({
    ...base,
    reason: z.literal('backoff'),
    until: utc.describe('when its retry is queued'),
    nextAttempt: z.number().int(),
    error: z.string().optional().describe("the failed attempt's error code"),
  }),
  z.object({
    ...base,
    reason: z.literal('approval'),
    since: utc,
    timeoutAt: utc.optional().describe('when its timeout applies the default decision or fails it'),
  }),
  z.object({
    ...base,
    reason: z.literal('signal'),
    name: z.string(),
    correlationKey: z.string(),
    since: utc,
    timeoutAt: utc.optional(),
  }),
  z.object({
    ...base,
    reason: z.literal('child_run'),
    childRunId: z.uuid(),
    childStatus: z.enum(RUN_STATES).optional(),
  }),
  z.object({
    ...base,
    reason: z.literal('map_instances'),
    total: z.number().int(),
    left: z.number().int().describe('instances that have not ended'),
  }),
  z.object({
    ...base,
    reason: z.literal('condition_pending'),
    since: utc.describe('when it began to wait'),
    expression: z.string().optional().describe('the precondition that did not hold'),
    checkEveryMs: z.number().int().optional(),
    maxWaitMs: z.number().int().optional(),
  }),
  ...(['no_matching_worker', 'workers_busy'] as const).map((r) =>
    z.object({
      ...base,
      reason: z.literal(r),
      pool: z.string(),
      taskType: z.string(),
      dispatchDeadline: utc.optional().describe('when the step fails if no worker took its task'),
    }),
  ),
  // A step the engine is moving between states, in the statement that moves it: read again.
  ...(['pending', 'queued', 'waiting', 'retrying', 'orphaned'] as const).map((r) =>
    z.object({ ...base, reason: z.literal(r) }),
  ),
] as const;

export const stepExplanationSchema = z.discriminatedUnion('reason', reasons).meta({ id: 'StepExplanation' });
export type StepExplanation = z.infer<typeof stepExplanationSchema>;

export const runWaitingSchema = z
  .object({ reason: z.enum(STEP_WAIT_REASONS), stepId: z.string() })
  .nullable()
  .meta({ id: 'RunWaiting' })
  .describe(
    'what holds the run up: the first unfinished step (topological order) that is neither running nor waiting on its dependencies, and its reason (GET /runs/{runId}/explain); null when there is none',
  );

export const runExplanationSchema = z
  .object({
    runId: z.uuid(),
    status: z.enum(RUN_STATES),
    waiting: runWaitingSchema,
    steps: z
      .array(stepExplanationSchema)
      .describe('each unfinished step, in topological order; none for a finished run'),
  })
  .meta({ id: 'RunExplanation' });
export type RunExplanation = z.infer<typeof runExplanationSchema>;
