import type { z } from 'zod';
import { badRequest, DomainError } from '../../core/errors/domain-error';
import type { Plugin } from '../plugins/plugin';
import { isTemplated, templatedStrings, type TemplatedString, type TemplateRef } from '../templating/template';
import { findCycle, upstreamOf } from './dag-graph';
import { dagDefinition, type DagDefinition } from './dag-definition';
import { checkCondition, checkPrecondition, ConditionError } from '../flow/condition';
import { mapIssues } from '../flow/map-step';
import {
  cliEgressWarnings,
  httpEgressIssues,
  inputReadFindings,
  templateTypeIssues,
  type DagIssue,
  type DagWarning,
  type JsonType,
} from './dag-publish-checks';
import { compileInputSchema } from './input-schema';

export type { DagIssue, DagWarning } from './dag-publish-checks';

export interface PluginLookup {
  get(name: string): Plugin | undefined;
  names(): string[];
}

function dotted(path: ReadonlyArray<PropertyKey>): string {
  return path.map(String).join('.');
}

function rawStepId(raw: unknown, index: unknown): string | undefined {
  if (typeof index !== 'number' || raw === null || typeof raw !== 'object') return undefined;
  const steps = (raw as { steps?: unknown }).steps;
  if (!Array.isArray(steps)) return undefined;
  const s: unknown = steps[index];
  const id = s !== null && typeof s === 'object' ? (s as { id?: unknown }).id : undefined;
  return typeof id === 'string' ? id : undefined;
}

/** The value at `path` inside `root`, and whether a templated string lies on the way to it. */
function templatedAlong(root: unknown, path: ReadonlyArray<PropertyKey>): boolean {
  let cur = root;
  for (let i = 0; ; i++) {
    if (typeof cur === 'string') return isTemplated(cur);
    if (i >= path.length || cur === null || typeof cur !== 'object') return false;
    cur = (cur as Record<string, unknown>)[String(path[i])];
  }
}

function containsTemplate(v: unknown): boolean {
  if (typeof v === 'string') return isTemplated(v);
  if (Array.isArray(v)) return v.some(containsTemplate);
  if (v !== null && typeof v === 'object') return Object.values(v).some(containsTemplate);
  return false;
}

function valueAt(root: unknown, path: ReadonlyArray<PropertyKey>): unknown {
  let cur = root;
  for (const k of path) {
    if (cur === null || typeof cur !== 'object') return undefined;
    cur = (cur as Record<string, unknown>)[String(k)];
  }
  return cur;
}

/**
 * Plugin config issues that templating may resolve are not errors at publish time: an issue at or
 * under a templated string (`sleepMs: "${{ inputs.ms }}"` where a number is expected), and a
 * refinement (`custom`) issue on a value that contains a template. The engine validates the
 * rendered config again before execution.
 */
function configIssues(schema: z.ZodType, config: unknown): z.core.$ZodIssue[] {
  const r = schema.safeParse(config);
  if (r.success) return [];
  return r.error.issues.filter(
    (i) => !templatedAlong(config, i.path) && !(i.code === 'custom' && containsTemplate(valueAt(config, i.path))),
  );
}

/** Deepest nesting a definition may have (the YAML reader applies the same bound). */
export const MAX_DEFINITION_DEPTH = 200;

/**
 * Finds what JSON.parse lets through but a definition cannot hold: a number that is not finite
 * (`1e309` parses as Infinity, which has no JSON form and no canonical hash) and nesting deeper
 * than MAX_DEFINITION_DEPTH. Walks iteratively, so hostile depth cannot exhaust the stack.
 */
function jsonShapeProblem(raw: unknown): DagIssue | undefined {
  const stack: { v: unknown; path: string[] }[] = [{ v: raw, path: [] }];
  while (stack.length > 0) {
    const { v, path } = stack.pop()!;
    if (typeof v === 'number' && !Number.isFinite(v)) {
      return { path: path.join('.'), message: 'numbers must be finite (1e309 and the like have no JSON value)' };
    }
    if (v === null || typeof v !== 'object') continue;
    if (path.length >= MAX_DEFINITION_DEPTH) {
      return { path: path.slice(0, 8).join('.') + '…', message: `nested deeper than ${MAX_DEFINITION_DEPTH} levels` };
    }
    for (const [k, x] of Object.entries(v)) stack.push({ v: x, path: [...path, k] });
  }
  return undefined;
}

/** A step's condition (or precondition): valid CEL of type bool that reads only the step's own dependencies. */
function conditionIssues(
  when: string,
  dependsOn: string[],
  path: string,
  step: string,
  check: (expression: string) => { steps: string[] } = checkCondition,
  label = 'condition',
): DagIssue[] {
  try {
    const { steps } = check(when);
    return steps
      .filter((id) => !dependsOn.includes(id))
      .map((id) => ({
        path,
        step,
        message: `${label} reads step "${id}", which is not a dependency of "${step}" (add it to dependsOn)`,
      }));
  } catch (e) {
    if (!(e instanceof ConditionError)) throw e;
    return [{ path, step, message: `${label}: ${e.message}` }];
  }
}

function fail(issues: DagIssue[]): never {
  const first = issues[0];
  const message = `${first.step !== undefined ? `step "${first.step}": ` : ''}${first.message} (at ${first.path || '(root)'})`;
  throw badRequest('DAG_INVALID', issues.length > 1 ? `${message}; and ${issues.length - 1} more` : message, {
    issues,
  });
}

/** The normalized definition of validateDagDefinition. */
export function validateDagDefinition(raw: unknown, plugins: PluginLookup): DagDefinition {
  return checkDagDefinition(raw, plugins).definition;
}

/**
 * Checks a raw definition (parsed JSON or YAML) and returns it normalized (durations in ms, defaults
 * filled, each step's dependsOn deduplicated and sorted) with the warnings it publishes with. Any
 * problem is a 400 DAG_INVALID whose details list every issue with its path and step. Checks: the
 * schema, duplicate step ids, unknown and self dependencies, cycles, unknown plugins, plugin config
 * against the plugin's schema, retry and timeout values, template syntax and references (a step may
 * reference only its upstream steps' outputs), the inputs JSON Schema, and what dag-publish-checks
 * knows at publish: template result types against the plugin's schema, inputs templates read
 * against the inputs schema (undeclared: an issue; not required: a warning), and literal hosts
 * against the step's egress.
 */
export function checkDagDefinition(
  raw: unknown,
  plugins: PluginLookup,
): { definition: DagDefinition; warnings: DagWarning[] } {
  const shapeProblem = jsonShapeProblem(raw);
  if (shapeProblem) fail([shapeProblem]);
  const parsed = dagDefinition.safeParse(raw);
  if (!parsed.success) {
    fail(
      parsed.error.issues.map((i) => {
        const step = i.path[0] === 'steps' ? rawStepId(raw, i.path[1]) : undefined;
        return { path: dotted(i.path), ...(step !== undefined ? { step } : {}), message: i.message };
      }),
    );
  }
  const def = parsed.data;
  const issues: DagIssue[] = [];
  const warnings: DagWarning[] = [];

  // The steps' templates are read against the inputs schema only when it compiles.
  let inputsSchema: Record<string, unknown> | undefined;
  let inputsIssue: DagIssue | undefined;
  if (def.inputs !== undefined) {
    try {
      compileInputSchema(def.inputs);
      inputsSchema = def.inputs;
    } catch (e) {
      if (!(e instanceof DomainError)) throw e;
      inputsIssue = { path: 'inputs', message: e.message };
    }
  }
  const ids = new Set<string>();
  def.steps.forEach((s, i) => {
    if (ids.has(s.id)) issues.push({ path: `steps.${i}.id`, step: s.id, message: `duplicate step id "${s.id}"` });
    ids.add(s.id);
  });

  let graphUsable = true;
  def.steps.forEach((s, i) => {
    s.dependsOn = [...new Set(s.dependsOn)].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
    for (const d of s.dependsOn) {
      if (d === s.id) {
        issues.push({ path: `steps.${i}.dependsOn`, step: s.id, message: 'step depends on itself' });
        graphUsable = false;
      } else if (!ids.has(d)) {
        issues.push({ path: `steps.${i}.dependsOn`, step: s.id, message: `depends on unknown step "${d}"` });
        graphUsable = false;
      }
    }
  });
  if (graphUsable) {
    const cycle = findCycle(def.steps);
    if (cycle) {
      const at = def.steps.findIndex((s) => s.id === cycle[0]);
      issues.push({
        path: `steps.${at}.dependsOn`,
        step: cycle[0],
        message: `dependency cycle ${cycle.join(' → ')} (→ reads "depends on")`,
      });
      graphUsable = false;
    }
  }

  let depsById: Map<string, string[]> | undefined;
  def.steps.forEach((s, i) => {
    const at = `steps.${i}`;
    if (s.timeout < 1) issues.push({ path: `${at}.timeout`, step: s.id, message: 'timeout must be at least 1ms' });
    if (s.retry && s.retry.initialDelay > s.retry.maxDelay) {
      issues.push({ path: `${at}.retry.initialDelay`, step: s.id, message: 'retry initialDelay exceeds maxDelay' });
    }
    const c = s.constraints;
    for (const k of ['maxExpectedRunTime', 'maxAllowedRunTime'] as const) {
      const types = new Set(c?.[k]?.actions.map((a) => a.type));
      if (types.has('fail') && types.has('skip'))
        issues.push({
          path: `${at}.constraints.${k}.actions`,
          step: s.id,
          message: 'a constraint either fails or skips the step, not both',
        });
    }
    if (c?.maxExpectedRunTime && c.maxAllowedRunTime && c.maxExpectedRunTime.after >= c.maxAllowedRunTime.after) {
      issues.push({
        path: `${at}.constraints.maxExpectedRunTime.after`,
        step: s.id,
        message: 'maxExpectedRunTime must be shorter than maxAllowedRunTime',
      });
    }

    const plugin = plugins.get(s.plugin);
    if (!plugin) {
      issues.push({
        path: `${at}.plugin`,
        step: s.id,
        message: `unknown plugin "${s.plugin}" (available: ${plugins.names().join(', ')})`,
      });
    } else {
      for (const ci of configIssues(plugin.configSchema, s.with)) {
        issues.push({
          path: dotted([...`${at}.with`.split('.'), ...ci.path]),
          step: s.id,
          message: `${s.plugin} config: ${ci.message}`,
        });
      }
    }

    if (s.when !== undefined) issues.push(...conditionIssues(s.when, s.dependsOn, `${at}.when`, s.id));
    if (s.map !== undefined || s.maxParallel !== undefined || JSON.stringify(s.with).includes('map.'))
      issues.push(...mapIssues(s, at));
    s.preconditions?.expressions.forEach((x, j) =>
      issues.push(
        ...conditionIssues(
          x,
          s.dependsOn,
          `${at}.preconditions.expressions.${j}`,
          s.id,
          checkPrecondition,
          'precondition',
        ),
      ),
    );

    let strings: TemplatedString[] = [];
    try {
      strings = templatedStrings(s.with);
    } catch (e) {
      if (!(e instanceof DomainError)) throw e;
      issues.push({ path: `${at}.with`, step: s.id, message: e.message });
    }
    const refs = strings.flatMap((t) => t.refs.map((r) => r.ref));
    let inputTypes = new Map<TemplateRef, JsonType>();
    if (inputsSchema !== undefined) {
      const found = inputReadFindings(inputsSchema, strings, at, s.id);
      issues.push(...found.issues);
      warnings.push(...found.warnings);
      inputTypes = found.types;
    }
    if (plugin) {
      issues.push(...templateTypeIssues(plugin, s.with, strings, (r) => inputTypes.get(r), at, s.id));
      if (s.plugin === 'http') {
        const urlTemplated = strings.some((t) => t.path.length === 1 && t.path[0] === 'url');
        issues.push(...httpEgressIssues(s, at, urlTemplated));
      }
      if (s.plugin === 'cli') warnings.push(...cliEgressWarnings(s, at));
    }
    let upstream: Set<string> | undefined;
    for (const r of refs) {
      if (r.kind !== 'steps') continue;
      depsById ??= new Map(def.steps.map((x) => [x.id, x.dependsOn]));
      upstream ??= graphUsable ? upstreamOf(depsById, s.id) : new Set(s.dependsOn);
      const target = r.path[0];
      if (!ids.has(target)) {
        issues.push({ path: `${at}.with`, step: s.id, message: `template references unknown step "${target}"` });
      } else if (!upstream.has(target)) {
        issues.push({
          path: `${at}.with`,
          step: s.id,
          message: `template references step "${target}", which is not upstream of "${s.id}" (add it to dependsOn)`,
        });
      }
    }
  });

  if (inputsIssue) issues.push(inputsIssue);
  if (issues.length > 0) fail(issues);
  return { definition: def, warnings };
}
