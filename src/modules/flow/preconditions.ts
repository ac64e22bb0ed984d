import type { JsonObject } from '../plugins/plugin';
import type { StepSpec } from '../runs/run-plan';
import { ConditionError, evaluatePrecondition, type ConditionScope } from './condition';

export type StepPreconditions = NonNullable<StepSpec['preconditions']>;

/**
 * One check of a step's preconditions at `now`: they hold when every expression is true (checked
 * in order; the first that is not is named). `data` is what the ledger records of the check.
 */
export type PreconditionVerdict =
  | { outcome: 'held'; data: JsonObject }
  | { outcome: 'false' | 'error'; expression: string; message: string; data: JsonObject };

export function checkPreconditions(p: StepPreconditions, scope: ConditionScope, now: Date): PreconditionVerdict {
  const at = now.toISOString();
  for (const [index, expression] of p.expressions.entries()) {
    try {
      if (evaluatePrecondition(expression, { ...scope, now })) continue;
      return {
        outcome: 'false',
        expression,
        message: `precondition ${JSON.stringify(expression)} is false`,
        data: { holds: false, now: at, index, expression },
      };
    } catch (e) {
      if (!(e instanceof ConditionError)) throw e;
      return {
        outcome: 'error',
        expression,
        message: `precondition ${JSON.stringify(expression)}: ${e.message}`,
        data: { holds: false, now: at, index, expression, error: e.message },
      };
    }
  }
  return { outcome: 'held', data: { holds: true, now: at } };
}

/** The scope of a condition or precondition: the run's inputs and its dependencies' outputs and statuses. */
export function conditionScope(
  inputs: unknown,
  upstream: Record<string, { outputs: unknown; status?: string; namedStatus?: string | null }>,
): ConditionScope {
  const steps: ConditionScope['steps'] = {};
  for (const [id, u] of Object.entries(upstream))
    steps[id] = { outputs: u.outputs, status: u.status ?? 'succeeded', namedStatus: u.namedStatus ?? null };
  return { inputs, steps };
}
