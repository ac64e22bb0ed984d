import { z } from 'zod';

const DURATION = /^(\d+(?:\.\d+)?)(ms|s|m|h|d)$/;
const UNIT_MS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };
const MAX_DURATION_MS = 7 * 86_400_000;

/** A duration as milliseconds or a string like `500ms`, `30s`, `5m`, `1h`; normalized to ms. */
export const duration = z
  .union([z.number().int().min(0), z.string().regex(DURATION, 'a duration like 500ms, 30s, 5m, 1h or a number of ms')])
  .transform((v, ctx) => {
    const ms = typeof v === 'number' ? v : Math.round(Number(DURATION.exec(v)![1]) * UNIT_MS[DURATION.exec(v)![2]]);
    if (ms > MAX_DURATION_MS) {
      ctx.addIssue({ code: 'custom', message: 'at most 7 days' });
      return z.NEVER;
    }
    return ms;
  });

export const STEP_ID = /^[A-Za-z_][A-Za-z0-9_-]{0,63}$/;
export const DAG_ID = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;
/** Egress host patterns: `api.example.com`, `api.example.com:8443`, `*.example.com`, `127.0.0.1:8080`, `[::1]:80`. */
export const EGRESS_HOST =
  /^(\*\.)?([A-Za-z0-9-]+(\.[A-Za-z0-9-]+)*|\d{1,3}(\.\d{1,3}){3}|\[[0-9A-Fa-f:.]+\])(:\d{1,5})?$/;

export const retryPolicy = z.strictObject({
  maxRetries: z.number().int().min(0).max(100),
  initialDelay: duration.default(1000),
  multiplier: z.number().min(1).max(10).default(2),
  maxDelay: duration.default(300_000),
});

export const constraintAction = z.discriminatedUnion('type', [
  z.strictObject({ type: z.literal('event') }),
  z.strictObject({ type: z.literal('webhook'), url: z.url({ protocol: /^https?$/ }) }),
  z.strictObject({ type: z.literal('fail') }),
  z.strictObject({ type: z.literal('skip') }),
]);

export const stepConstraints = z.strictObject({
  /** Past this run time: the actions run (typically an event and a webhook); the step goes on, unless one is `fail` or `skip`. */
  maxExpectedRunTime: z.strictObject({ after: duration, actions: z.array(constraintAction).min(1).max(5) }).optional(),
  /** Past this run time: the step is killed and the actions run; it fails, or with a `skip` action ends skipped. */
  maxAllowedRunTime: z
    .strictObject({ after: duration, actions: z.array(constraintAction).max(5).default([]) })
    .optional(),
});

/**
 * Pre-execution constraints: CEL expressions over `inputs`, `steps.<dependency>` and `now`, all of
 * which must hold before the step's plugin runs. Otherwise `onViolation`: `fail` (PRECONDITION_FAILED),
 * `skip` (skipped, reason precondition_false), or `wait`: checked again every `checkEvery`, without
 * holding a slot or a lease, until they hold or `maxWait` passes (then PRECONDITION_TIMEOUT).
 */
export const stepPreconditions = z
  .strictObject({
    expressions: z.array(z.string().min(1).max(4000)).min(1).max(16),
    onViolation: z.enum(['wait', 'skip', 'fail']).default('fail'),
    maxWait: duration.optional(),
    checkEvery: duration.default(5000),
  })
  .superRefine((p, ctx) => {
    if (p.onViolation === 'wait' && p.maxWait === undefined)
      ctx.addIssue({ code: 'custom', path: ['maxWait'], message: 'onViolation wait needs a maxWait' });
    if (p.checkEvery < 500) ctx.addIssue({ code: 'custom', path: ['checkEvery'], message: 'at least 500ms' });
  });

export const dagConstraints = z.strictObject({
  /** At most `limit` runs of this DAG running at once; the next ones wait (`queue`) or are skipped. */
  maxConcurrentRuns: z
    .strictObject({ limit: z.number().int().min(1).max(10_000), action: z.enum(['queue', 'skip']) })
    .optional(),
});

/** When a step whose dependencies ended may run (Airflow's trigger rules); all_success when absent. */
export const TRIGGER_RULES = [
  'all_success',
  'all_done',
  'all_failed',
  'all_skipped',
  'one_success',
  'one_failed',
  'one_done',
  'none_failed',
  'none_skipped',
  'none_failed_min_one_success',
] as const;
export type TriggerRule = (typeof TRIGGER_RULES)[number];

/** The decisions on an approval step, which are its named statuses. */
export const APPROVAL_DECISIONS = ['approved', 'rejected'] as const;

/** A named status a step may end with (`approved`, `rejected`…). */
export const STATUS_NAME = /^[a-z][a-z0-9_]{0,39}$/;
const statusName = z
  .string()
  .regex(STATUS_NAME, 'lower-case letters, digits and _, starting with a letter, at most 40');

/** The most elements a map step fans out to; more fail the step (MAP_TOO_LARGE). */
export const MAX_MAP_ITEMS = 10_000;

/** A dependency: a step id, or a step and the named status this step needs it to end with. */
const dependency = z.union([z.string(), z.strictObject({ step: z.string(), status: statusName })]);

const stepFields = z.strictObject({
  id: z.string().regex(STEP_ID, 'letters, digits, _ and -, starting with a letter or _, at most 64'),
  description: z.string().max(2000).optional(),
  plugin: z.string().min(1).max(64),
  with: z.record(z.string(), z.unknown()).default({}),
  dependsOn: z.array(dependency).max(1000).default([]),
  retry: retryPolicy.optional(),
  timeout: duration.default(300_000),
  /** At most this many attempts of this step run at once across the tenant's runs of this DAG. */
  concurrency: z.number().int().min(1).max(10_000).optional(),
  disabled: z.boolean().default(false),
  egress: z.array(z.string().regex(EGRESS_HOST, 'a host, host:port or *.suffix')).max(100).default([]),
  constraints: stepConstraints.optional(),
  /** A CEL condition over `inputs` and `steps.<dependency>.{outputs,status}`: false skips the step. */
  when: z.string().min(1).max(4000).optional(),
  /** When the step may run, given how its dependencies ended. */
  trigger: z.enum(TRIGGER_RULES).optional(),
  /** The longest the step may wait for a slot once ready: past it, it fails (DISPATCH_TIMEOUT) instead of running. */
  dispatchTimeout: duration.optional(),
  /** Expressions that must hold before the step runs, and what happens while they do not. */
  preconditions: stepPreconditions.optional(),
  /** The named statuses the step may end with; it must end with one of them (else UNKNOWN_STATUS). */
  statuses: z.array(statusName).min(1).max(32).optional(),
  /** The named status needed of each dependency listed here (what `{step, status}` entries of dependsOn normalize to). */
  onStatus: z.record(z.string(), statusName).optional(),
  /** Dynamic fan-out: one whole template (`${{ steps.<id>.outputs.x }}`, `${{ inputs.x }}`) giving an array; the step runs once per element. */
  map: z.string().min(1).max(4000).optional(),
  /** How many of a map step's instances run at once (all when absent). */
  maxParallel: z.number().int().min(1).max(MAX_MAP_ITEMS).optional(),
  /** Its place in the tenant's ready queue (0-9, higher first), instead of its run's priority. */
  priority: z.number().int().min(0).max(9).optional(),
  /** When the step ends failed with a permanent error, the whole run fails at once (its other steps are cancelled). */
  failRun: z.boolean().optional(),
});

/**
 * A step. Its `{step, status}` dependencies normalize to step ids in `dependsOn` and the status
 * needed of each in `onStatus`.
 */
export const stepDefinition = stepFields.transform((s, ctx) => {
  const ids: string[] = [];
  const on: Record<string, string> = { ...(s.onStatus ?? {}) };
  for (const d of s.dependsOn) {
    if (typeof d === 'string') {
      ids.push(d);
      continue;
    }
    ids.push(d.step);
    if (on[d.step] !== undefined && on[d.step] !== d.status)
      ctx.addIssue({ code: 'custom', path: ['dependsOn'], message: `two statuses needed of step "${d.step}"` });
    on[d.step] = d.status;
  }
  const { onStatus: _given, ...rest } = s;
  return {
    ...rest,
    dependsOn: ids,
    ...(Object.keys(on).length > 0 ? { onStatus: on } : {}),
    // An approval step ends with its decision.
    ...(s.plugin === 'approval' && s.statuses === undefined ? { statuses: [...APPROVAL_DECISIONS] } : {}),
  };
});

/** A DAG definition as published (JSON or YAML). Parsing normalizes durations to ms and fills defaults. */
export const dagDefinition = z
  .strictObject({
    id: z.string().regex(DAG_ID, 'letters, digits, ., _ and -, at most 128'),
    description: z.string().max(10_000).optional(),
    /** JSON Schema (draft 2020-12 subset) that run inputs must match. */
    inputs: z.record(z.string(), z.unknown()).optional(),
    constraints: dagConstraints.optional(),
    /** What happens to a run that ends failed: `deadletter` puts it in the tenant's dead-letter. */
    onFailure: z.enum(['deadletter']).optional(),
    steps: z.array(stepDefinition).min(1).max(1000),
  })
  .superRefine((d, ctx) => {
    // A status needed of a step is one it declares, and the step is a dependency.
    const declared = new Map(d.steps.map((s) => [s.id, s.statuses]));
    d.steps.forEach((s, i) => {
      for (const [dep, status] of Object.entries(s.onStatus ?? {})) {
        const path = ['steps', i, 'dependsOn'];
        if (!s.dependsOn.includes(dep))
          ctx.addIssue({ code: 'custom', path, message: `needs a status of "${dep}", which is not a dependency` });
        else if (declared.has(dep) && !declared.get(dep)?.includes(status))
          ctx.addIssue({
            code: 'custom',
            path,
            message: `needs status "${status}" of "${dep}", which declares ${
              declared.get(dep) ? `statuses ${declared.get(dep)!.join(', ')}` : 'no statuses'
            }`,
          });
      }
    });
  })
  .meta({ id: 'DagDefinition' });

export type DagDefinition = z.output<typeof dagDefinition>;
export type DagDefinitionInput = z.input<typeof dagDefinition>;
export type StepDefinition = z.output<typeof stepDefinition>;
export type RetryPolicy = z.output<typeof retryPolicy>;
export type ConstraintAction = z.output<typeof constraintAction>;
