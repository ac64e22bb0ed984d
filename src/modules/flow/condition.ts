import { Environment } from '@marcbachmann/cel-js';

/**
 * Step conditions (`when:`): CEL expressions over `inputs` (the run's inputs) and `steps.<id>`
 * (`outputs`, `status` and `namedStatus` of the step's dependencies), evaluated by the worker when the step is
 * dispatched. CEL has no loops, I/O, clock or randomness, so a condition is a pure function of its
 * data; the parse limits below bound its size and nesting, and its data (a run's inputs and its
 * dependencies' outputs) is bounded by the request and output limits.
 */
const env = new Environment({
  limits: { maxAstNodes: 512, maxDepth: 32, maxListElements: 256, maxMapEntries: 256, maxCallArguments: 8 },
})
  .registerVariable('inputs', 'map')
  .registerVariable('steps', 'map');

/**
 * Step preconditions (`preconditions:`): the same language, limits and data as a condition, plus
 * `now`, the time of the check (a CEL timestamp, UTC). Reading `now` makes a precondition depend on
 * the clock: its recorded results (step events) are what an audit of the run relies on.
 */
const preconditionEnv = env.clone().registerVariable('now', 'google.protobuf.Timestamp');

/** The longest condition accepted (characters). */
export const MAX_CONDITION_LENGTH = 4_000;

export type StepStatusForCondition = 'succeeded' | 'failed' | 'skipped';

/** What a condition reads: the run's inputs and, by step id, its dependencies' outputs and status. */
export interface ConditionScope {
  inputs: unknown;
  steps: Record<string, { outputs: unknown; status: string; namedStatus: string | null }>;
}

/** What a precondition reads: a condition's data and the time of the check. */
export interface PreconditionScope extends ConditionScope {
  now: Date;
}

export class ConditionError extends Error {}

interface AstNode {
  op: string;
  args: unknown;
}

function isNode(v: unknown): v is AstNode {
  return v !== null && typeof v === 'object' && typeof (v as AstNode).op === 'string';
}

/** The ids of the steps an expression reads (`steps.<id>` or `steps["<id>"]`); throws if it reads `steps` otherwise. */
function stepRefs(node: unknown, out: Set<string>): void {
  if (Array.isArray(node)) {
    for (const n of node) stepRefs(n, out);
    return;
  }
  if (!isNode(node)) return;
  const args = node.args;
  if ((node.op === '.' || node.op === '[]') && Array.isArray(args) && isNode(args[0]) && args[0].op === 'id') {
    if (args[0].args === 'steps') {
      const key: unknown = node.op === '.' ? args[1] : isNode(args[1]) && args[1].op === 'value' ? args[1].args : null;
      if (typeof key !== 'string') throw new ConditionError('steps must be read by a literal step id (steps.<id>)');
      out.add(key);
      return;
    }
  }
  if (node.op === 'id' && args === 'steps')
    throw new ConditionError('steps must be read by a literal step id (steps.<id>)');
  stepRefs(args, out);
}

/**
 * Checks a condition at publish: it parses within the limits, its type can be bool, and the steps
 * it reads. Throws ConditionError with CEL's message.
 */
export function checkCondition(expression: string): { steps: string[] } {
  return checkIn(env, expression);
}

/** Checks a precondition at publish, as checkCondition does a condition (it may also read `now`). */
export function checkPrecondition(expression: string): { steps: string[] } {
  return checkIn(preconditionEnv, expression);
}

function checkIn(e: Environment, expression: string): { steps: string[] } {
  if (expression.length > MAX_CONDITION_LENGTH) throw new ConditionError(`at most ${MAX_CONDITION_LENGTH} characters`);
  let parsed;
  try {
    parsed = e.parse(expression);
  } catch (e) {
    throw new ConditionError(firstLine(e));
  }
  const checked = parsed.check();
  if (!checked.valid) throw new ConditionError(firstLine(checked.error));
  const type = String(checked.type);
  if (type !== 'bool' && type !== 'dyn') throw new ConditionError(`must be a bool expression, not ${type}`);
  const steps = new Set<string>();
  stepRefs(parsed.ast, steps);
  return { steps: [...steps].sort() };
}

type Compiled = (scope: ConditionScope) => unknown;
const compiled = new Map<string, Compiled>();
const compiledPre = new Map<string, Compiled>();
const MAX_COMPILED = 1_000;

/** Evaluates a condition published with the step; throws ConditionError when it fails or is not a bool. */
export function evaluateCondition(expression: string, scope: ConditionScope): boolean {
  return evaluateIn(env, compiled, expression, scope);
}

/** Evaluates a precondition published with the step at `scope.now`, as evaluateCondition does a condition. */
export function evaluatePrecondition(expression: string, scope: PreconditionScope): boolean {
  return evaluateIn(preconditionEnv, compiledPre, expression, scope);
}

function evaluateIn(e: Environment, cache: Map<string, Compiled>, expression: string, scope: ConditionScope): boolean {
  let fn = cache.get(expression);
  if (!fn) {
    try {
      const p = e.parse(expression);
      fn = (s) => p(s);
    } catch (err) {
      throw new ConditionError(firstLine(err));
    }
    if (cache.size >= MAX_COMPILED) cache.clear();
    cache.set(expression, fn);
  }
  let value: unknown;
  try {
    value = fn(scope);
  } catch (e) {
    throw new ConditionError(firstLine(e));
  }
  if (typeof value !== 'boolean') throw new ConditionError(`the condition gave ${typeof value}, not a bool`);
  return value;
}

function firstLine(e: unknown): string {
  return (e instanceof Error ? e.message : String(e)).split('\n')[0].trim();
}
