import type { z } from 'zod';
import type { JsonObject, JsonValue } from '../../core/json/json-value';
import type { Sandbox } from '../sandbox/sandbox';

export type { JsonObject, JsonValue };

/** One line of a step's log. */
export interface StepLogLine {
  ts: string;
  level: 'debug' | 'info' | 'warn' | 'error';
  message: string;
}

/**
 * What a plugin gets besides its config. The config it receives is already templated
 * (`${{ inputs.x }}`, `${{ steps.a.outputs.y }}`, `${{ secrets.NAME }}` resolved).
 */
export interface PluginContext {
  tenantId: string;
  dagId: string;
  dagVersion: number;
  runId: string;
  stepId: string;
  /** 1 for the first attempt, 2 for the first retry, … */
  attempt: number;
  /** W3C traceparent of this step attempt; plugins propagate it on outbound calls. */
  traceparent: string;
  /** Aborted on cancel, timeout, `maxAllowedRunTime`, or lease loss: stop promptly. */
  signal: AbortSignal;
  /** The run's inputs, for plugins that take data rather than config (script). */
  inputs?: JsonValue;
  /** Outputs of the step's upstream steps, `{ <stepId>: { outputs } }`. */
  steps?: Record<string, { outputs: JsonValue }>;
  /** Hosts this step may reach (exact `host`, `host:port` or `*.suffix`); empty = no network. */
  egress: readonly string[];
  /**
   * The process's sandboxes and the operator's settings for them: the egress policy, the `cli`
   * runner, the script sandbox pool. Plugins take their settings from here, never from the environment.
   */
  sandbox: Sandbox;
  /** Milliseconds this attempt may run (the step's `timeout`); the engine also enforces it. */
  timeoutMs: number;
  /** Appends to the step log (size-capped by the engine; secrets redacted by the engine). */
  log(level: StepLogLine['level'], message: string): void;
  /** Replaces every secret value that was injected into this step's config with `[redacted]`. */
  redact(text: string): string;
}

/**
 * What kind of failure a step's error is: `transient` (the step's retry policy applies),
 * `permanent` (no retry; with the step's `failRun`, its run fails at once) or `invalid_input`
 * (no retry, and the run fails at once, naming the input in `PluginError.input`).
 */
export type ErrorClass = 'transient' | 'permanent' | 'invalid_input';

export interface PluginError {
  /** Stable code, e.g. HTTP_STATUS, TIMEOUT, EGRESS_DENIED, SCRIPT_ERROR, EXIT_CODE. */
  code: string;
  message: string;
  /** True for transient failures (5xx, network errors): the step's retry policy applies. */
  retryable: boolean;
  /**
   * The error's class. Absent, it follows `retryable` (transient when true, else permanent); given,
   * it decides and `retryable` is made to agree (true only for transient).
   */
  class?: ErrorClass;
  /** For `invalid_input`: the input at fault (`inputs.url`, `with.body.id`, a template expression). */
  input?: string;
}

/** A step error's class: its own, or the one its `retryable` flag implies. */
export function errorClass(e: Pick<PluginError, 'retryable' | 'class'>): ErrorClass {
  return e.class ?? (e.retryable ? 'transient' : 'permanent');
}

/** An error with `retryable` made to agree with its class (an error without a class is left as is). */
export function classified(e: PluginError): PluginError {
  if (e.class === undefined) return e;
  return { ...e, retryable: e.class === 'transient' };
}

export type PluginResult =
  /** `namedStatus`: the named status the step ends with, one its definition declares (`statuses`). */
  | { status: 'succeeded'; outputs: JsonObject; namedStatus?: string; logs?: StepLogLine[] }
  | { status: 'failed'; error: PluginError; outputs?: JsonObject; logs?: StepLogLine[] };

/**
 * What a step waits for, outside the engine (a decision): the step is handed back, holding no
 * slot and no lease, until it comes. Its members (strings, integers, booleans) are recorded in the
 * step.waiting event; `timeoutMs` schedules the wait's timeout.
 */
export type WaitRequest = { kind: string; timeoutMs?: number } & Record<string, string | number | boolean>;

/**
 * A plugin: one self-contained module under `plugins/<name>/index.ts` whose default export is
 * this object. `configSchema` validates a step's `with` at publish time (before templating,
 * template strings are accepted wherever a string is) and again, templated, before execution.
 */
export interface Plugin<C = unknown> {
  name: string;
  description: string;
  configSchema: z.ZodType<C>;
  execute(config: C, ctx: PluginContext): Promise<PluginResult>;
  /**
   * A plugin whose steps wait for something outside the engine: the worker calls this instead of
   * `execute`, hands the step back as waiting, and the step resumes when what it waits for comes.
   */
  waitFor?(config: C): WaitRequest;
  /**
   * What the engine keeps with a wait besides its event (a `queue` step's task: type, pool,
   * requirements, inputs); not recorded in the step.waiting event.
   */
  waitData?(config: C): JsonObject;
  /** The engine fills `ctx.inputs` and `ctx.steps` for this plugin even when its config has no template. */
  receivesRunData?: boolean;
  /**
   * For a step that reaches no host, the plugin has no effect outside its result (no files, no
   * processes, no messages): the engine may run such a step right after the step it depends on
   * succeeded, before that result commits, and commit both together (a chain).
   */
  sideEffectFree?: boolean;
}

export function definePlugin<C>(p: Plugin<C>): Plugin<C> {
  return p;
}
