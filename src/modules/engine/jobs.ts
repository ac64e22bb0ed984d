import { z } from 'zod';

/**
 * The engine's graphile-worker jobs: name → payload schema and options. Payloads carry ids only;
 * handlers read the current state. Jobs are added with graphile_worker.add_job in the same
 * transaction as the state change that needs them, under a deterministic job_key.
 */
export const JOBS = {
  /**
   * A retrying step's backoff elapsed: queue it again (attempt = the attempt that failed). Added by
   * db/functions/ordo_engine_advance.sql with the failure that retries (job key
   * `retry:<tenant>:<run>:<step>:<attempt>`, 25 attempts).
   */
  'ordo.engine.retry_step': {
    payload: z.strictObject({
      tenantId: z.string(),
      runId: z.uuid(),
      stepId: z.string(),
      attempt: z.number().int().min(1),
    }),
  },
  /**
   * A waiting step's timeout passed (epoch = the epoch it waits at): its default decision applies,
   * or it fails. Added by db/functions/ordo_engine_advance.sql when the step starts waiting (job key
   * `timeout:<tenant>:<run>:<step>:<epoch>`).
   */
  'ordo.engine.step_timeout': {
    payload: z.strictObject({
      tenantId: z.string(),
      runId: z.uuid(),
      stepId: z.string(),
      epoch: z.number().int().min(0),
    }),
  },
  /**
   * A signal step started waiting (at epoch) for the signal `name` with `correlationKey` (as its
   * config rendered them): it takes the oldest signal kept for that key, or registers its wait for
   * the next one. Added by db/functions/ordo_engine_advance.sql with the wait (job key
   * `signal:<tenant>:<run>:<step>:<epoch>`).
   */
  'ordo.engine.signal_wait': {
    payload: z.strictObject({
      tenantId: z.string(),
      runId: z.uuid(),
      stepId: z.string(),
      epoch: z.number().int().min(0),
      name: z.string(),
      correlationKey: z.string(),
    }),
  },
  /**
   * A scheduled run's notBefore came: the run is queued and its ready steps with it, unless it is no
   * longer scheduled (cancelled). Added by db/functions/ordo_create_runs.sql with the run, run_at =
   * notBefore (job key `start:<tenant>:<run>`, 25 attempts).
   */
  'ordo.engine.start_run': {
    payload: z.strictObject({ tenantId: z.string(), runId: z.uuid() }),
  },
  /**
   * Check `check` of a step that waits for its preconditions (epoch = the epoch it waits at): queued
   * again when they hold, failed past its maxWait, else checked again. Added by
   * db/functions/ordo_engine_advance.sql (check 1) and ordo_engine_precondition.sql (job key
   * `precondition:<tenant>:<run>:<step>:<epoch>:<check>`, 25 attempts).
   */
  'ordo.engine.precondition_check': {
    payload: z.strictObject({
      tenantId: z.string(),
      runId: z.uuid(),
      stepId: z.string(),
      epoch: z.number().int().min(0),
      check: z.number().int().min(1),
    }),
  },
  /**
   * A child run of a `dag` step ended (runId and stepId: the parent's): the step, if it still waits
   * for that child, ends with the child's outputs or fails CHILD_RUN_FAILED. Added by
   * db/functions/ordo_engine_advance.sql and ordo_engine_chain.sql with the child's end (or with the
   * step's wait, when the child ended first) and after a cancel of the child (job key
   * `child:<tenant>:<childRunId>`, 25 attempts).
   */
  'ordo.engine.child_ended': {
    payload: z.strictObject({
      tenantId: z.string(),
      runId: z.uuid(),
      stepId: z.string(),
      childRunId: z.uuid(),
    }),
  },
  /** POSTs a constraint event (run_event seq) to the webhook URL it names, signed with the tenant's secret. */
  'ordo.engine.webhook': {
    payload: z.strictObject({ tenantId: z.string(), runId: z.uuid(), seq: z.number().int().min(1) }),
    maxAttempts: 10,
    jobKey: (p: { tenantId: string; runId: string; seq: number }) => `webhook:${p.tenantId}:${p.runId}:${p.seq}`,
  },
} as const;

export type JobName = keyof typeof JOBS;
export type JobPayload<N extends JobName> = z.infer<(typeof JOBS)[N]['payload']>;
