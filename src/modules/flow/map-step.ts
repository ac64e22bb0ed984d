import { DomainError } from '../../core/errors/domain-error';
import { MAX_MAP_ITEMS, type StepDefinition } from '../dags/dag-definition';
import type { DagIssue } from '../dags/dag-publish-checks';
import type { JsonValue } from '../plugins/plugin';
import {
  renderTemplate,
  TemplateError,
  templatedStrings,
  templateRefs,
  type TemplateRef,
} from '../templating/template';

/**
 * Map steps (dynamic fan-out). A step with `map: ${{ … }}` runs once per element of the array its
 * template gives: the worker that runs the map step renders the list and hands it to the engine
 * (ordo_map_expand), which writes one instance per element (`<step>[<index>]`), each an ordinary
 * step row with its own attempts, retries and events; the map step waits until they all ended
 * (ordo_map_join) and then ends with their outputs as an array ordered by index.
 */

/** The reference a map step's list is read from: `${{ inputs… }}` or `${{ steps.<id>.outputs… }}`, a whole template. */
export function mapSource(map: string): TemplateRef {
  const [t] = templatedStrings(map);
  if (!t?.whole)
    throw new TemplateError(
      'TEMPLATE_INVALID',
      'map must be one whole template, like ${{ steps.list.outputs.items }}',
      {},
    );
  const ref = t.refs[0].ref;
  if (ref.kind !== 'inputs' && ref.kind !== 'steps')
    throw new TemplateError('TEMPLATE_INVALID', 'map reads inputs or an upstream step’s outputs', {});
  return ref;
}

/**
 * What publishing refuses of a step's map fields: a list that is not one template over inputs or a
 * dependency's outputs, maxParallel without map, map with a concurrency limit, and `map.*`
 * references in a step that is not a map step.
 */
export function mapIssues(s: StepDefinition, at: string): DagIssue[] {
  const issues: DagIssue[] = [];
  const issue = (path: string, message: string) => issues.push({ path: `${at}.${path}`, step: s.id, message });
  if (s.map === undefined) {
    if (s.maxParallel !== undefined) issue('maxParallel', 'maxParallel applies to map steps only');
    let refs: TemplateRef[] = [];
    try {
      refs = templateRefs(s.with);
    } catch (e) {
      if (!(e instanceof DomainError)) throw e;
    }
    if (refs.some((r) => r.kind === 'map')) issue('with', 'map.item and map.index exist only in a map step');
    return issues;
  }
  if (s.concurrency !== undefined)
    issue('concurrency', 'a map step limits its instances with maxParallel, not concurrency');
  try {
    const ref = mapSource(s.map);
    if (ref.kind === 'steps' && !s.dependsOn.includes(ref.path[0]))
      issue('map', `map reads step "${ref.path[0]}", which is not a dependency of "${s.id}" (add it to dependsOn)`);
  } catch (e) {
    if (!(e instanceof DomainError)) throw e;
    issue('map', e.message);
  }
  return issues;
}

/** Why a map step's list cannot be fanned out (the step fails with this code, no retry). */
export class MapError extends Error {
  constructor(
    readonly code: 'MAP_NOT_ARRAY' | 'MAP_TOO_LARGE' | 'TEMPLATE_INVALID' | 'TEMPLATE_UNRESOLVED' | 'TEMPLATE_TOO_DEEP',
    message: string,
  ) {
    super(message);
  }
}

/** The elements a map step fans out to, rendered from the run's inputs and its dependencies' outputs. */
export function mapItems(
  map: string,
  scope: { inputs: JsonValue; steps: Record<string, { outputs: JsonValue }> },
): JsonValue[] {
  let value: JsonValue;
  try {
    value = renderTemplate(map, scope).value;
  } catch (e) {
    if (e instanceof TemplateError) throw new MapError(e.code as MapError['code'], e.message);
    throw e;
  }
  if (!Array.isArray(value))
    throw new MapError('MAP_NOT_ARRAY', `map ${map} gave ${value === null ? 'null' : typeof value}, not an array`);
  if (value.length > MAX_MAP_ITEMS)
    throw new MapError('MAP_TOO_LARGE', `map ${map} gave ${value.length} elements, more than ${MAX_MAP_ITEMS}`);
  return value;
}

/** Whether a step id names a map instance (`resize[17]`: step ids never hold brackets). */
export const isMapInstance = (stepId: string): boolean => stepId.endsWith(']');
