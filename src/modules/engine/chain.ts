import { randomBytes } from 'node:crypto';
import { dagDefinition } from '../dags/dag-definition';
import type { JsonObject } from '../plugins/plugin';
import { planRun, type PlannedStep } from '../runs/run-plan';
import { templateRefs, type TemplateRef } from '../templating/template';
import type { ClaimedWork } from './engine.store';

/** A DAG version's steps as its runs plan them, each step's dependents and the references its templates make. */
export interface ChainPlan {
  steps: Map<string, PlannedStep>;
  dependents: Map<string, string[]>;
  refs: Map<string, TemplateRef[]>;
}

export function chainPlan(definition: unknown): ChainPlan {
  const planned = planRun(dagDefinition.parse(definition));
  const dependents = new Map<string, string[]>();
  for (const s of planned) for (const d of s.dependsOn) dependents.set(d, [...(dependents.get(d) ?? []), s.stepId]);
  return {
    steps: new Map(planned.map((s) => [s.stepId, s])),
    dependents,
    refs: new Map(planned.map((s) => [s.stepId, templateRefs(s.config)])),
  };
}

/** What the worker tells about plugins. */
export interface ChainPlugins {
  /** The plugin has no effect outside its result for a step that reaches no host. */
  sideEffectFree(plugin: string): boolean;
  /** The plugin takes the run's inputs and upstream outputs even without templates. */
  receivesRunData(plugin: string): boolean;
}

/**
 * The step a worker may run right after `prev` succeeded with `outputs`, before that result
 * commits (a link of a chain, committed with it by ordo_engine_chain), or null. It must be the
 * only dependent of `prev`'s step and depend on it alone, so that nothing but `prev`'s result
 * makes it ready; not disabled, with no constraint, no concurrency limit and no egress, and its
 * plugin without effects outside its result, so that running it early can change nothing but its
 * result, which is discarded if the chain does not commit. The data its templates take must be at
 * hand: `prev`'s outputs, and the run's inputs only when `hasInputs`.
 */
export function nextLink(
  plan: ChainPlan,
  prev: ClaimedWork,
  outputs: JsonObject,
  hasInputs: boolean,
  plugins: ChainPlugins,
): ClaimedWork | null {
  const after = plan.dependents.get(prev.stepId);
  if (after?.length !== 1) return null;
  const s = plan.steps.get(after[0]);
  if (!s || s.dependsOn.length !== 1 || s.dependsOn[0] !== prev.stepId) return null;
  const c = s.spec.constraints;
  if (s.spec.disabled || s.spec.concurrency != null || s.spec.egress.length > 0) return null;
  // A condition is evaluated, and a trigger rule decided, only where a result is applied.
  if (s.spec.when !== undefined || s.spec.trigger !== undefined) return null;
  if (s.spec.preconditions !== undefined) return null;
  if (s.spec.statuses !== undefined || s.spec.onStatus !== undefined) return null;
  // A map step fans out where its result is applied.
  if (s.spec.map !== undefined) return null;
  if (c && Object.keys(c).length > 0) return null;
  if (!plugins.sideEffectFree(s.plugin)) return null;
  const runData = plugins.receivesRunData(s.plugin);
  const refs = plan.refs.get(s.stepId) ?? [];
  if ((runData || refs.some((r) => r.kind === 'inputs')) && !hasInputs) return null;
  if (refs.some((r) => r.kind === 'steps' && r.path[0] !== prev.stepId)) return null;
  return {
    tenantId: prev.tenantId,
    runId: prev.runId,
    stepId: s.stepId,
    attempt: 1,
    // The database gives the epoch when the chain commits.
    epoch: 0,
    plugin: s.plugin,
    config: s.config,
    spec: s.spec,
    dagId: prev.dagId,
    dagVersion: prev.dagVersion,
    traceId: prev.traceId,
    traceparent: `00-${prev.traceId}-${randomBytes(8).toString('hex')}-01`,
    dispatchSeq: prev.dispatchSeq + 1,
    queuedAt: new Date(),
    inputs: hasInputs ? prev.inputs : {},
    upstream: { [prev.stepId]: { outputs } },
    needsData: refs.length > 0 || runData,
    dependsOn: [prev.stepId],
  };
}
