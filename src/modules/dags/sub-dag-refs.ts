import type { TenantTx } from '../../core/database/handles';
import { badRequest } from '../../core/errors/domain-error';
import type { DagDefinition, StepDefinition } from './dag-definition';
import type { DagsRepository } from './dags.repository';

/** The plugin of steps that run another DAG as a child run. */
export const DAG_STEP_PLUGIN = 'dag';

/** The DAG version a `dag` step's config names (after publish, always a number). */
export interface SubDagRef {
  dag: string;
  version: number;
}

/** The child DAG a published `dag` step runs (its config's `dag` and resolved `version`). */
export function subDagRef(step: Pick<StepDefinition, 'plugin' | 'with'>): SubDagRef | null {
  if (step.plugin !== DAG_STEP_PLUGIN) return null;
  const w = step.with as { dag?: unknown; version?: unknown };
  return typeof w.dag === 'string' && typeof w.version === 'number' ? { dag: w.dag, version: w.version } : null;
}

/** How many published versions a cycle check reads at most. */
const MAX_VISITED = 1_000;

/**
 * Resolves the child DAG of each `dag` step at publish, in the tenant's transaction: a pinned
 * version must exist, `latest` (or none) becomes the newest active version's number, so the
 * published version always runs the same child. A step may not reach the DAG being published
 * through the children's pinned references (a cycle). Any problem is 400 DAG_INVALID naming the step.
 */
export async function resolveSubDags(
  tx: TenantTx,
  dags: Pick<DagsRepository, 'findVersion'>,
  def: DagDefinition,
): Promise<DagDefinition> {
  if (!def.steps.some((s) => s.plugin === DAG_STEP_PLUGIN)) return def;
  const steps: StepDefinition[] = [];
  for (const [i, s] of def.steps.entries()) {
    if (s.plugin !== DAG_STEP_PLUGIN) {
      steps.push(s);
      continue;
    }
    const w = s.with as { dag?: unknown; version?: unknown };
    const invalid = (message: string) =>
      badRequest('DAG_INVALID', `step "${s.id}": ${message} (at steps.${i}.with)`, {
        issues: [{ path: `steps.${i}.with`, step: s.id, message }],
      });
    if (typeof w.dag !== 'string' || w.dag.includes('${{')) throw invalid('`dag` must name a DAG (no template)');
    const pinned = typeof w.version === 'number' ? w.version : undefined;
    const found = await dags.findVersion(tx, w.dag, pinned);
    if (!found)
      throw invalid(
        pinned === undefined ? `DAG ${w.dag} has no active version` : `DAG ${w.dag} has no version ${pinned}`,
      );
    const cycle = await cycleThrough(tx, dags, def.id, { dag: found.dagId, version: found.version });
    if (cycle) throw invalid(`runs DAG ${def.id} again (cycle: ${[def.id, ...cycle].join(' -> ')})`);
    steps.push({ ...s, with: { ...s.with, version: found.version } });
  }
  return { ...def, steps };
}

/** The chain of `dag@version` from `start` that reaches DAG `target` through pinned references, if any. */
async function cycleThrough(
  tx: TenantTx,
  dags: Pick<DagsRepository, 'findVersion'>,
  target: string,
  start: SubDagRef,
): Promise<string[] | null> {
  const seen = new Set<string>();
  const walk = async (ref: SubDagRef, path: string[]): Promise<string[] | null> => {
    const here = [...path, `${ref.dag}@${ref.version}`];
    if (ref.dag === target) return here;
    const key = `${ref.dag}\u0000${ref.version}`;
    if (seen.has(key) || seen.size >= MAX_VISITED) return null;
    seen.add(key);
    const v = await dags.findVersion(tx, ref.dag, ref.version);
    for (const s of v?.definition.steps ?? []) {
      const child = subDagRef(s);
      const found = child && (await walk(child, here));
      if (found) return found;
    }
    return null;
  };
  return walk(start, []);
}
