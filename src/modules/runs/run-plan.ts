import type { DagDefinition, StepDefinition, TriggerRule } from '../dags/dag-definition';
import { topologicalOrder } from '../dags/dag-graph';
import type { JsonObject, JsonValue } from '../plugins/plugin';

/** What the engine needs of a step definition besides plugin and config (stored as step.spec). */
export interface StepSpec {
  retry: StepDefinition['retry'] | null;
  timeout: number;
  egress: string[];
  constraints: StepDefinition['constraints'] | null;
  disabled: boolean;
  /** At most this many attempts of the step run at once across the tenant's runs of its DAG (null: no limit). */
  concurrency?: number | null;
  /** Its condition (CEL), evaluated when it is dispatched: false skips it. */
  when?: string;
  /** Its trigger rule (db/functions/ordo_trigger_decision.sql); all_success when absent. */
  trigger?: TriggerRule;
  /** The longest it may wait in the queue for a slot (ms): past it, it fails DISPATCH_TIMEOUT instead of running. */
  dispatchTimeout?: number;
  /** Expressions (CEL) that must hold before it runs, checked when it is dispatched (see StepExecutor). */
  preconditions?: NonNullable<StepDefinition['preconditions']>;
  /** The named statuses it may end with (it must end with one). */
  statuses?: string[];
  /** The named status needed of a dependency: any other counts as skipped here. */
  onStatus?: Record<string, string>;
  /** A map step's list (a whole template): it runs once per element (see db/functions/ordo_map_expand.sql). */
  map?: string;
  /** How many of a map step's instances run at once. */
  maxParallel?: number;
  /** A map instance's step, index and element (set by the engine on the instance's row). */
  mapOf?: string;
  mapIndex?: number;
  item?: JsonValue;
  /** The gate of a map instance under maxParallel (its run and map step; see ordo_step_gate). */
  gate?: string;
  /** Its priority in the tenant's ready queue (0-9, higher first; DEFAULT_PRIORITY when absent). */
  priority?: number;
  /** A permanent failure of the step fails its run at once (its other steps are cancelled). */
  failRun?: true;
}

/** The priority of a run, and of its steps, that names none. */
export const DEFAULT_PRIORITY = 5;

/**
 * A ready step put into the queue. A step with a concurrency limit waits there under its gate
 * (db/functions/ordo_step_gate.sql): the claim takes it only while fewer of the gate's steps run.
 */
export interface QueuedStep {
  runId: string;
  stepId: string;
}

export type InitialStepStatus = 'pending' | 'queued' | 'skipped' | 'succeeded' | 'cancelled';

export interface PlannedStep {
  stepId: string;
  plugin: string;
  config: JsonObject;
  spec: StepSpec;
  dependsOn: string[];
  topoIndex: number;
  pendingDeps: number;
  status: InitialStepStatus;
  reason: string | null;
  fromRerun: boolean;
  outputs: JsonValue | null;
  outputsHash: string | null;
}

/** Outputs a rerun takes over from the run it reruns, by step id. */
export type ReusedOutputs = Map<string, { outputs: JsonValue | null; outputsHash: string | null }>;

/** Every step downstream of `stepId` (not including it). */
export function descendants(steps: readonly Pick<StepDefinition, 'id' | 'dependsOn'>[], stepId: string): Set<string> {
  const dependents = new Map<string, string[]>();
  for (const s of steps) for (const d of s.dependsOn) dependents.set(d, [...(dependents.get(d) ?? []), s.id]);
  const seen = new Set<string>();
  const stack = [...(dependents.get(stepId) ?? [])];
  while (stack.length > 0) {
    const id = stack.pop()!;
    if (seen.has(id)) continue;
    seen.add(id);
    stack.push(...(dependents.get(id) ?? []));
  }
  return seen;
}

/**
 * The trigger rules a step whose dependencies all succeeded runs under (the others skip it), as
 * ordo_trigger_decision decides them; test/medium/trigger-rules.test.ts holds this set to it.
 */
export const RULES_MET_BY_SUCCESS: ReadonlySet<TriggerRule> = new Set<TriggerRule>([
  'all_success',
  'all_done',
  'one_success',
  'one_done',
  'none_failed',
  'none_skipped',
  'none_failed_min_one_success',
]);

/** The plans of the definitions runs were created from without reused outputs (a definition never changes). */
const plans = new WeakMap<DagDefinition, readonly PlannedStep[]>();

/**
 * The initial state of every step of a new run: roots queued, disabled steps skipped (their
 * dependents still run), steps reused by a rerun succeeded, the rest pending with the number of
 * dependencies still to finish. The plan of a definition without reused outputs is made once and
 * shared: its steps are not to be changed.
 */
export function planRun(def: DagDefinition, reuse: ReusedOutputs = new Map()): readonly PlannedStep[] {
  if (reuse.size > 0) return plan(def, reuse);
  let p = plans.get(def);
  if (!p) plans.set(def, (p = plan(def, reuse)));
  return p;
}

function plan(def: DagDefinition, reuse: ReusedOutputs): PlannedStep[] {
  const order = topologicalOrder(def.steps);
  const byId = new Map(def.steps.map((s) => [s.id, s]));
  const done = new Set<string>();
  return order.map((id, topoIndex) => {
    const s = byId.get(id)!;
    const pendingDeps = s.dependsOn.filter((d) => !done.has(d)).length;
    let status: InitialStepStatus = 'pending';
    let reason: string | null = null;
    const reused = reuse.get(id);
    if (pendingDeps === 0) {
      if (s.disabled) {
        status = 'skipped';
        reason = 'disabled';
      } else if (reused) status = 'succeeded';
      else if (s.dependsOn.length > 0 && s.trigger && !RULES_MET_BY_SUCCESS.has(s.trigger)) {
        // Every dependency was reused (succeeded) or disabled: a rule that wants a failure or a skip is not met.
        status = 'skipped';
        reason = 'trigger_rule';
      } else status = 'queued';
    }
    if (status === 'skipped' || status === 'succeeded') done.add(id);
    return {
      stepId: id,
      plugin: s.plugin,
      config: s.with as JsonObject,
      spec: {
        retry: s.retry ?? null,
        timeout: s.timeout,
        egress: s.egress,
        constraints: s.constraints ?? null,
        disabled: s.disabled,
        concurrency: s.concurrency ?? null,
        ...(s.when !== undefined ? { when: s.when } : {}),
        ...(s.trigger !== undefined ? { trigger: s.trigger } : {}),
        ...(s.dispatchTimeout !== undefined ? { dispatchTimeout: s.dispatchTimeout } : {}),
        ...(s.preconditions !== undefined ? { preconditions: s.preconditions } : {}),
        ...(s.statuses !== undefined ? { statuses: s.statuses } : {}),
        ...(s.onStatus !== undefined ? { onStatus: s.onStatus } : {}),
        ...(s.map !== undefined ? { map: s.map } : {}),
        ...(s.maxParallel !== undefined ? { maxParallel: s.maxParallel } : {}),
        ...(s.priority !== undefined ? { priority: s.priority } : {}),
        ...(s.failRun === true ? { failRun: true as const } : {}),
      },
      dependsOn: [...s.dependsOn],
      topoIndex,
      pendingDeps,
      status,
      reason,
      fromRerun: status === 'succeeded',
      outputs: status === 'succeeded' ? (reused?.outputs ?? null) : null,
      outputsHash: status === 'succeeded' ? (reused?.outputsHash ?? null) : null,
    };
  });
}

/**
 * The plan of a run created with a priority: each step that names none takes the run's (a step's
 * own priority holds over its run's). A run without one keeps the shared plan as it is.
 */
export function withRunPriority(plan: readonly PlannedStep[], priority: number | undefined): readonly PlannedStep[] {
  if (priority === undefined) return plan;
  return plan.map((s) => (s.spec.priority !== undefined ? s : { ...s, spec: { ...s.spec, priority } }));
}
