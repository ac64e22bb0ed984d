import { recordStepFinished } from '../../core/telemetry/metrics';
import { currentTraceparent, withChildSpan, withStepSpan } from '../../core/telemetry/tracing';
import {
  classified,
  type JsonObject,
  type JsonValue,
  type PluginContext,
  type PluginError,
  type PluginResult,
  type StepLogLine,
  type WaitRequest,
} from '../plugins/plugin';
import type { PluginRegistry } from '../plugins/plugin-registry';
import type { Sandbox } from '../sandbox/sandbox';
import { makeRedactor, redactJson } from '../secrets/redact';
import { SecretNotFoundError, type SecretsService } from '../secrets/secrets.service';
import { ConditionError, evaluateCondition, type ConditionScope } from '../flow/condition';
import { MapError, mapItems } from '../flow/map-step';
import { checkPreconditions, conditionScope } from '../flow/preconditions';
import { renderTemplate, TemplateError, templateRefs } from '../templating/template';
import type { ConstraintsService } from './constraints.service';
import { completionFor, type ClaimedWork, type Completion } from './engine.store';
import { stopStep, type RunningStep } from './running-step';
import type { DagStepConfig, SubDagsService } from './sub-dags.service';
import { canonicalJson } from '../../core/json/canonical-json';
import type { QuotaChecks } from '../plans/quota-checks';
import { QUOTA_EXCEEDED } from '../plans/quota-exceeded';

/** Log lines kept per attempt (plugin lines and the engine's). */
const MAX_LOG_LINES = 1_000;

/**
 * Runs one claimed step: templates its config (inputs, upstream outputs, secrets resolved at call
 * time), checks it against its plugin's schema, calls the plugin with the step's context under its
 * timeout and run-time constraints, and turns what happened into the attempt's result: outputs and
 * log lines with every injected secret redacted, or the failure (a plugin that ignores its abort
 * signal does not hold the result back).
 */
export class StepExecutor {
  constructor(
    private readonly workerId: string,
    private readonly plugins: PluginRegistry,
    private readonly secrets: SecretsService,
    private readonly sandbox: Sandbox,
    private readonly constraints: ConstraintsService,
    private readonly subDags: Pick<SubDagsService, 'start'>,
    private readonly quotas?: Pick<QuotaChecks, 'artifactRefusal'>,
  ) {}

  /** Runs `r`'s step to its result (never throws: a plugin's exception is its step's failure). */
  async execute(r: RunningStep): Promise<Completion> {
    const w = r.work;
    const waited = Date.now() - w.queuedAt.getTime();
    if (w.spec.dispatchTimeout !== undefined && waited > w.spec.dispatchTimeout) {
      const at = new Date();
      return completionFor(
        w,
        this.workerId,
        {
          status: 'failed',
          error: {
            code: 'DISPATCH_TIMEOUT',
            message: `step waited ${waited} ms for a slot, longer than its dispatchTimeout of ${w.spec.dispatchTimeout} ms`,
            retryable: false,
          },
          logs: [],
        },
        at,
        at,
      );
    }
    if (w.spec.when !== undefined) {
      const at = new Date();
      const verdict = this.condition(w);
      if (verdict !== true) return completionFor(w, this.workerId, verdict, at, new Date());
    }
    if (w.spec.preconditions !== undefined && !w.resumed) {
      const at = new Date();
      const verdict = await this.preconditions(w, at);
      if (verdict !== true) return completionFor(w, this.workerId, verdict, at, new Date());
    }
    if (w.spec.map !== undefined) return this.fanOut(w);
    const logs: StepLogLine[] = [];
    // Replaced by a redactor of the secret values injected into this attempt's config (once resolved).
    const secrets: { redact: (text: string) => string } = { redact: unredacted };
    const redact = (text: string) => secrets.redact(text);
    const timers: NodeJS.Timeout[] = [setTimeout(() => stopStep(r, 'timeout'), w.spec.timeout)];
    const c = w.spec.constraints;
    if (c?.maxAllowedRunTime)
      timers.push(setTimeout(() => stopStep(r, 'max_allowed_run_time'), c.maxAllowedRunTime.after));
    const expectedEnds = c?.maxExpectedRunTime?.actions.find((a) => a.type === 'fail' || a.type === 'skip');
    if (c?.maxExpectedRunTime) {
      const m = c.maxExpectedRunTime;
      // A fail or skip action stops the step (its breach is recorded with its result, below);
      // the others only record it and the step goes on.
      timers.push(
        setTimeout(
          () =>
            expectedEnds
              ? stopStep(r, 'max_expected_run_time')
              : void this.constraints.breached(w, 'maxExpectedRunTime', m.after, m.actions, 'warned'),
          m.after,
        ),
      );
    }
    const startedAt = new Date();
    let result: PluginResult | Waiting;
    try {
      const { tenantId: tenant, dagId, runId, stepId, attempt, traceId, traceparent, plugin } = w;
      const attrs = { tenant, dagId, runId, stepId, attempt, traceId, traceparent, plugin };
      result = await withStepSpan(attrs, async (span) => {
        const res = await this.invoke(w, r, logs, secrets, redact);
        span.setStatus(r.reason === 'cancelled' ? 'cancelled' : r.reason ? 'failed' : res.status);
        return res;
      });
    } catch (e) {
      result = fail('PLUGIN_ERROR', redact(e instanceof Error ? e.message : String(e)), false);
    } finally {
      for (const t of timers) clearTimeout(t);
    }
    const finishedAt = new Date();
    const done = (outcome: Completion['outcome']) => completionFor(w, this.workerId, outcome, startedAt, finishedAt);
    recordStepFinished(w.tenantId, r.reason ? 'aborted' : result.status, startedAt, finishedAt);
    const own = result.status === 'waiting' ? [] : (result.logs ?? []);
    const lines =
      logs.length === 0 && own.length === 0
        ? []
        : [...logs, ...own].slice(0, MAX_LOG_LINES).map((l) => ({ ...l, message: redact(l.message) }));
    switch (r.reason) {
      case 'cancelled':
      case 'lease_lost':
      case 'shutdown':
      case 'superseded':
        return done({ status: 'aborted', logs: lines });
      case 'timeout':
        return done({
          status: 'failed',
          error: { code: 'TIMEOUT', message: `step exceeded its timeout of ${w.spec.timeout} ms`, retryable: true },
          logs: lines,
        });
      case 'max_expected_run_time': {
        const m = c!.maxExpectedRunTime!;
        const effect = expectedEnds!.type === 'skip' ? 'skipped' : 'failed';
        await this.constraints.breached(w, 'maxExpectedRunTime', m.after, m.actions, effect).catch(() => undefined);
        if (effect === 'skipped')
          return done({ status: 'skipped', skip: { reason: 'max_expected_run_time', afterMs: m.after }, logs: lines });
        return done({
          status: 'failed',
          error: {
            code: 'MAX_EXPECTED_RUN_TIME',
            message: `step ran longer than ${m.after} ms and its constraint fails it`,
            retryable: false,
          },
          logs: lines,
        });
      }
      case 'max_allowed_run_time': {
        const m = c!.maxAllowedRunTime!;
        const skip = m.actions.some((a) => a.type === 'skip');
        await this.constraints
          .breached(w, 'maxAllowedRunTime', m.after, m.actions, skip ? 'skipped' : 'killed')
          .catch(() => undefined);
        if (skip)
          return done({ status: 'skipped', skip: { reason: 'max_allowed_run_time', afterMs: m.after }, logs: lines });
        return done({
          status: 'failed',
          error: {
            code: 'MAX_ALLOWED_RUN_TIME',
            message: `step ran longer than ${m.after} ms and was stopped`,
            retryable: false,
          },
          logs: lines,
        });
      }
      case null:
        break;
    }
    if (result.status === 'waiting')
      return done({
        status: 'waiting',
        wait: result.wait,
        ...(result.data !== undefined ? { data: result.data } : {}),
        logs: lines,
      });
    const unknown = result.status === 'succeeded' ? unknownStatus(w.spec.statuses, result.namedStatus) : null;
    if (unknown)
      return done({
        status: 'failed',
        error: { code: 'UNKNOWN_STATUS', message: unknown, retryable: false },
        logs: lines,
      });
    if (result.status === 'succeeded') {
      // Outputs are stored and passed downstream: a secret value a plugin echoed back does not survive into them.
      const outputs = secrets.redact === unredacted ? result.outputs : redactJson(redact, result.outputs);
      // Outputs that would take the tenant past its plan's maxArtifactBytes are not stored: the step fails (not retried).
      // A check that cannot reach the database fails the attempt as transient (retried), so that
      // execute never throws.
      let refused: Awaited<ReturnType<QuotaChecks['artifactRefusal']>> | undefined;
      try {
        refused = await this.quotas?.artifactRefusal(w.tenantId, () =>
          Buffer.byteLength(canonicalJson(outputs ?? {}), 'utf8'),
        );
      } catch {
        return done({
          status: 'failed',
          error: { code: 'QUOTA_CHECK_FAILED', message: 'the artifact quota could not be checked', retryable: true },
          logs: lines,
        });
      }
      if (refused)
        return done({
          status: 'failed',
          error: {
            code: QUOTA_EXCEEDED,
            message: `the step's outputs would take the tenant past its plan's maxArtifactBytes (${refused.value}; ${refused.current} stored)`,
            retryable: false,
            class: 'permanent',
          },
          logs: lines,
        });
      return done({
        status: 'succeeded',
        ...(result.namedStatus !== undefined ? { namedStatus: result.namedStatus } : {}),
        outputs,
        logs: lines,
      });
    }
    return done({
      status: 'failed',
      error: classified({ ...result.error, message: redact(result.error.message) }),
      logs: lines,
    });
  }

  /** The step's condition: true runs it; false ends it skipped; an expression that fails fails the step. */
  private condition(w: ClaimedWork): true | Completion['outcome'] {
    const steps: ConditionScope['steps'] = {};
    for (const [id, u] of Object.entries(w.upstream))
      steps[id] = { outputs: u.outputs, status: u.status ?? 'succeeded', namedStatus: u.namedStatus ?? null };
    try {
      if (evaluateCondition(w.spec.when!, { inputs: w.inputs, steps })) return true;
      return { status: 'skipped', skip: { reason: 'condition_false', value: false, when: w.spec.when! }, logs: [] };
    } catch (e) {
      if (!(e instanceof ConditionError)) throw e;
      return {
        status: 'failed',
        error: {
          code: 'CONDITION_FAILED',
          message: `condition ${JSON.stringify(w.spec.when)}: ${e.message}`,
          retryable: false,
        },
        logs: [],
      };
    }
  }

  /**
   * A map step's attempt: its list rendered and handed back as waiting with the elements, for the
   * engine to write one instance each; an empty list succeeds at once with no results; a list that
   * is not an array, or is longer than MAX_MAP_ITEMS, fails the step (no retry).
   */
  private fanOut(w: ClaimedWork): Completion {
    const at = new Date();
    const done = (outcome: Completion['outcome']) => completionFor(w, this.workerId, outcome, at, new Date());
    let items: JsonValue[];
    try {
      items = mapItems(w.spec.map!, { inputs: w.inputs, steps: w.upstream });
    } catch (e) {
      if (!(e instanceof MapError)) throw e;
      return done({ status: 'failed', error: { code: e.code, message: e.message, retryable: false }, logs: [] });
    }
    if (items.length === 0) return done({ status: 'succeeded', outputs: { results: [] }, logs: [] });
    return done({ status: 'waiting', wait: { kind: 'map', count: items.length }, items, logs: [] });
  }

  /**
   * The step's preconditions, checked at `now` (a step that resumes after a check found them holding
   * is not checked again): true runs it; otherwise its onViolation ends it skipped or failed, or hands
   * it back to wait for them. An expression that cannot be evaluated fails the step.
   */
  private async preconditions(w: ClaimedWork, now: Date): Promise<true | Completion['outcome']> {
    const pre = w.spec.preconditions!;
    const v = checkPreconditions(pre, conditionScope(w.inputs, w.upstream), now);
    if (v.outcome === 'held') {
      await this.constraints.preconditionHeld(w, v.data);
      return true;
    }
    if (v.outcome === 'error')
      return {
        status: 'failed',
        error: { code: 'PRECONDITION_ERROR', message: v.message, retryable: false },
        logs: [],
      };
    switch (pre.onViolation) {
      case 'skip':
        return { status: 'skipped', skip: { reason: 'precondition_false', ...v.data }, logs: [] };
      case 'fail':
        return {
          status: 'failed',
          error: { code: 'PRECONDITION_FAILED', message: v.message, retryable: false },
          logs: [],
        };
      case 'wait':
        return {
          status: 'waiting',
          wait: {
            kind: 'precondition',
            ...v.data,
            checkEveryMs: Math.min(pre.checkEvery, pre.maxWait ?? 0),
            maxWaitMs: pre.maxWait ?? 0,
          },
          logs: [],
        };
    }
  }

  private async invoke(
    w: ClaimedWork,
    r: RunningStep,
    logs: StepLogLine[],
    secrets: { redact: (text: string) => string },
    redact: (t: string) => string,
  ): Promise<PluginResult | Waiting> {
    const plugin = this.plugins.get(w.plugin);
    if (!plugin) return fail('PLUGIN_NOT_FOUND', `no plugin named ${w.plugin}`, false);
    let config: unknown = w.config;
    const used: { secrets: string[] } = { secrets: [] };
    if (JSON.stringify(w.config).includes('${{')) {
      try {
        const names = templateRefs(w.config)
          .filter((ref) => ref.kind === 'secrets')
          .map((ref) => ref.path[0]);
        const values = names.length > 0 ? await this.secrets.resolve(w.tenantId, names) : {};
        const rendered = renderTemplate(w.config, {
          inputs: w.inputs,
          steps: w.upstream,
          secrets: values,
          ...(w.spec.mapOf !== undefined ? { map: { item: w.spec.item ?? null, index: w.spec.mapIndex ?? 0 } } : {}),
        });
        used.secrets = rendered.usedSecrets.map((n) => values[n]);
        secrets.redact = makeRedactor(used.secrets);
        config = rendered.value;
      } catch (e) {
        // A reference the run's inputs or upstream outputs cannot fill is the input's fault; a missing secret is not.
        if (e instanceof TemplateError) return invalidInput(e.code, e.message, templateInput(e));
        if (e instanceof SecretNotFoundError) return fail(e.code, e.message, false);
        throw e;
      }
    }
    const parsed = plugin.configSchema.safeParse(config);
    if (!parsed.success) {
      const message = redact(parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; '));
      // The config passed the schema at publish: what fails now came from the run's data.
      return invalidInput('CONFIG_INVALID', message, ['with', ...parsed.error.issues[0].path.map(String)].join('.'));
    }
    if (plugin.waitFor) {
      const wait = plugin.waitFor(parsed.data);
      if (wait.kind === 'queue' && used.secrets.length > 0 && plugin.waitData!(parsed.data).secretsAllowed !== true)
        return fail(
          'SECRETS_NOT_ALLOWED',
          'a queue step hands secrets to a worker only with allowSecrets: true',
          false,
        );
      if (wait.kind === 'queue')
        return { status: 'waiting', wait, data: this.task(w, plugin.waitData!(parsed.data), used) };
      if (wait.kind !== 'dag') return { status: 'waiting', wait };
      // A `dag` step waits for the child run it starts (or fails before it).
      const started = await this.subDags.start(w, parsed.data as DagStepConfig);
      return 'kind' in started ? { status: 'waiting', wait: started } : started;
    }
    const ctx: PluginContext = {
      tenantId: w.tenantId,
      dagId: w.dagId,
      dagVersion: w.dagVersion,
      runId: w.runId,
      stepId: w.stepId,
      attempt: w.attempt,
      traceparent: w.traceparent,
      signal: r.ac.signal,
      egress: w.spec.egress,
      sandbox: this.sandbox,
      timeoutMs: w.spec.timeout,
      inputs: w.inputs,
      steps: w.upstream,
      log: (level, message) => {
        if (logs.length < MAX_LOG_LINES) logs.push({ ts: new Date().toISOString(), level, message: redact(message) });
      },
      redact,
    };
    // A call that can reach another system is a child span, whose traceparent its outbound calls
    // carry; one that reaches nothing (a side-effect-free plugin with no egress) runs in the step's span.
    if (plugin.sideEffectFree && w.spec.egress.length === 0)
      return this.call(r, () => plugin.execute(parsed.data, ctx));
    return withChildSpan('orchestrator.plugin', { plugin: w.plugin }, () =>
      this.call(r, () => plugin.execute(parsed.data, { ...ctx, traceparent: currentTraceparent() ?? ctx.traceparent })),
    );
  }

  /**
   * A queue step's task (see plugins/queue): what its config made of it, with the step's trace
   * context, its timeout (the task's deadline) and dispatchTimeout; inputs that carry secrets are
   * sealed for the database, bound to this attempt, and so are the secret values (what the worker
   * sends back is redacted against them).
   */
  private task(w: ClaimedWork, data: JsonObject, used: { secrets: string[] }): JsonObject {
    const { inputs, secretsAllowed: _allowed, ...rest } = data;
    const task: JsonObject = {
      ...rest,
      traceparent: w.traceparent,
      timeoutMs: w.spec.timeout,
      ...(w.spec.dispatchTimeout !== undefined ? { dispatchTimeoutMs: w.spec.dispatchTimeout } : {}),
    };
    if (used.secrets.length === 0) return { ...task, inputs };
    const sealed = this.secrets.sealJson(taskInputsContext(w.tenantId, w.runId, w.stepId, w.attempt), inputs);
    const values = this.secrets.sealJson(taskSecretsContext(w.tenantId, w.runId, w.stepId, w.attempt), used.secrets);
    return { ...task, inputsSealed: { ...sealed }, secretsSealed: { ...values } };
  }

  /**
   * A plugin call that settles when the plugin does or when its step is stopped, whichever comes
   * first: a plugin that ignores its abort signal does not hold the slot.
   */
  private call(r: RunningStep, execute: () => Promise<PluginResult>): Promise<PluginResult> {
    return new Promise<PluginResult>((resolve, reject) => {
      const abort = () => resolve(fail('ABORTED', 'aborted', true));
      if (r.reason) return abort();
      r.aborted = abort;
      execute().then(resolve, reject);
    });
  }
}

/** Why a success's named status is not one the step may end with (null when it is). */
export function unknownStatus(declared: readonly string[] | undefined, named: string | undefined): string | null {
  if (declared === undefined)
    return named === undefined ? null : `the step ended with status "${named}" but declares no statuses`;
  if (named === undefined) return `the step must end with one of its statuses (${declared.join(', ')})`;
  return declared.includes(named) ? null : `status "${named}" is not one of the step's (${declared.join(', ')})`;
}

/** A step handed back to wait (its plugin's waitFor), with what the engine keeps beside the wait. */
interface Waiting {
  status: 'waiting';
  wait: WaitRequest;
  data?: JsonObject;
}

/** What a queue task's sealed inputs are bound to: its tenant, run, step and attempt. */
export function taskInputsContext(tenantId: string, runId: string, stepId: string, attempt: number): string {
  return JSON.stringify(['ordo.task.inputs', tenantId, runId, stepId, attempt]);
}

/** What a queue task's secret values are sealed to (see `task`): the attempt, as for its inputs. */
export function taskSecretsContext(tenantId: string, runId: string, stepId: string, attempt: number): string {
  return JSON.stringify(['ordo.task.secrets', tenantId, runId, stepId, attempt]);
}

/** The redactor of an attempt that was given no secret. */
const unredacted = (text: string): string => text;

function fail(code: string, message: string, retryable: boolean): PluginResult {
  const error: PluginError = { code, message, retryable };
  return { status: 'failed', error, outputs: {} };
}

/** A failure caused by the run's data: no retry, and the run fails at once naming `input`. */
function invalidInput(code: string, message: string, input: string): PluginResult {
  return { status: 'failed', error: { code, message, retryable: false, class: 'invalid_input', input }, outputs: {} };
}

/** The input a template error is about: its expression, or the config path it was found at. */
function templateInput(e: TemplateError): string {
  const d = e.details as { expression?: string; path?: string[] } | undefined;
  if (d?.expression !== undefined) return d.expression;
  return ['with', ...(d?.path ?? [])].join('.');
}

/** What a step that never ran reports: stopped before it started. */
export function abortedCompletion(w: ClaimedWork, workerId: string): Completion {
  return completionFor(w, workerId, { status: 'aborted', logs: [] });
}
