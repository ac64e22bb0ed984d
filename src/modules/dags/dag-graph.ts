/** The dependency graph of a DAG's steps: deterministic order, cycles, and its DOT / JSON forms. */

import { subDagRef, type SubDagRef } from './sub-dag-refs';

export interface GraphStep {
  id: string;
  dependsOn: readonly string[];
}

function byId(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

function insertSorted(arr: string[], id: string): void {
  let lo = 0;
  let hi = arr.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (arr[mid] < id) lo = mid + 1;
    else hi = mid;
  }
  arr.splice(lo, 0, id);
}

/**
 * Topological order with ties broken lexically by step id (Kahn's algorithm over a sorted ready
 * set): among the steps whose dependencies are all placed, the smallest id comes next. The same
 * steps always give the same order, whatever order they are listed in. Dependencies on ids that
 * are not steps are ignored; throws when the steps contain a cycle.
 */
export function topologicalOrder(steps: readonly GraphStep[]): string[] {
  const ids = new Set(steps.map((s) => s.id));
  const indegree = new Map<string, number>();
  const dependents = new Map<string, string[]>();
  for (const s of steps) {
    const deps = new Set(s.dependsOn.filter((d) => ids.has(d)));
    indegree.set(s.id, deps.size);
    for (const d of deps) {
      const list = dependents.get(d);
      if (list) list.push(s.id);
      else dependents.set(d, [s.id]);
    }
  }
  const ready = [...indegree]
    .filter(([, n]) => n === 0)
    .map(([id]) => id)
    .sort(byId);
  const order: string[] = [];
  while (ready.length > 0) {
    const id = ready.shift()!;
    order.push(id);
    for (const next of dependents.get(id) ?? []) {
      const n = indegree.get(next)! - 1;
      indegree.set(next, n);
      if (n === 0) insertSorted(ready, next);
    }
  }
  if (order.length !== indegree.size) {
    const cycle = findCycle(steps);
    throw new Error(`steps contain a dependency cycle${cycle ? `: ${cycle.join(' → ')}` : ''}`);
  }
  return order;
}

/**
 * One dependency cycle, if any, as step ids following `dependsOn` and ending where it starts
 * (`['a', 'b', 'a']`: a depends on b, b on a). Deterministic: the search visits steps and their
 * dependencies in lexical order and the cycle is rotated to start at its smallest id.
 */
export function findCycle(steps: readonly GraphStep[]): string[] | undefined {
  const deps = new Map<string, string[]>();
  for (const s of steps) deps.set(s.id, [...new Set(s.dependsOn)].sort(byId));
  const state = new Map<string, 1 | 2>(); // 1: on the current path, 2: done
  const path: string[] = [];
  for (const start of [...deps.keys()].sort(byId)) {
    if (state.has(start)) continue;
    // Iterative DFS so that long chains cannot exhaust the stack.
    const stack: Array<{ id: string; next: number }> = [{ id: start, next: 0 }];
    state.set(start, 1);
    path.push(start);
    while (stack.length > 0) {
      const top = stack[stack.length - 1];
      const children = deps.get(top.id) ?? [];
      if (top.next < children.length) {
        const child = children[top.next++];
        if (!deps.has(child)) continue;
        const st = state.get(child);
        if (st === 1) {
          const cycle = path.slice(path.indexOf(child));
          const min = cycle.reduce((m, id, i) => (id < cycle[m] ? i : m), 0);
          const rotated = [...cycle.slice(min), ...cycle.slice(0, min)];
          return [...rotated, rotated[0]];
        }
        if (st === undefined) {
          state.set(child, 1);
          path.push(child);
          stack.push({ id: child, next: 0 });
        }
      } else {
        state.set(top.id, 2);
        path.pop();
        stack.pop();
      }
    }
  }
  return undefined;
}

/** Every step `id` depends on, directly or transitively (cycles tolerated); `steps` may be a prebuilt id → dependsOn map. */
export function upstreamOf(
  steps: readonly GraphStep[] | ReadonlyMap<string, readonly string[]>,
  id: string,
): Set<string> {
  const deps = steps instanceof Map ? steps : new Map((steps as readonly GraphStep[]).map((s) => [s.id, s.dependsOn]));
  const seen = new Set<string>();
  const todo = [...(deps.get(id) ?? [])];
  while (todo.length > 0) {
    const d = todo.pop()!;
    if (seen.has(d)) continue;
    seen.add(d);
    todo.push(...(deps.get(d) ?? []));
  }
  return seen;
}

export interface GraphNode {
  id: string;
  plugin: string;
  disabled: boolean;
  /** Its condition (CEL): false skips it. */
  when?: string;
  /** Its trigger rule, when not all_success. */
  trigger?: string;
  /** A map step's list (it runs once per element) and how many of its instances run at once. */
  map?: string;
  maxParallel?: number;
  /** Its preconditions and what happens while they do not hold. */
  preconditions?: { expressions: string[]; onViolation: string };
  /** The DAG version it runs as a child run (a `dag` step). */
  subDag?: SubDagRef;
}

type GraphInput = GraphStep & {
  plugin: string;
  disabled?: boolean;
  when?: string;
  trigger?: string;
  map?: string;
  maxParallel?: number;
  preconditions?: { expressions: string[]; onViolation: string };
  onStatus?: Record<string, string>;
  with?: Record<string, unknown>;
};

export interface DagGraphJson {
  nodes: GraphNode[];
  /** `from` runs before `to` (`to` depends on `from`; only when `from` ends with `status`, if given), sorted by (from, to). */
  edges: Array<{ from: string; to: string; status?: string }>;
  /** The deterministic dispatch order (topologicalOrder). */
  order: string[];
}

export function graphJson(steps: ReadonlyArray<GraphInput>): DagGraphJson {
  const order = topologicalOrder(steps);
  const nodes = [...steps]
    .sort((a, b) => byId(a.id, b.id))
    .map((s) => ({
      id: s.id,
      plugin: s.plugin,
      disabled: s.disabled ?? false,
      ...(s.when !== undefined ? { when: s.when } : {}),
      ...(s.trigger !== undefined && s.trigger !== 'all_success' ? { trigger: s.trigger } : {}),
      ...(s.map !== undefined ? { map: s.map } : {}),
      ...(s.maxParallel !== undefined ? { maxParallel: s.maxParallel } : {}),
      ...(s.preconditions !== undefined
        ? { preconditions: { expressions: s.preconditions.expressions, onViolation: s.preconditions.onViolation } }
        : {}),
      ...subDagOf(s),
    }));
  const edges = steps
    .flatMap((s) =>
      [...new Set(s.dependsOn)].map((from) => ({
        from,
        to: s.id,
        ...(s.onStatus?.[from] !== undefined ? { status: s.onStatus[from] } : {}),
      })),
    )
    .sort((a, b) => byId(a.from, b.from) || byId(a.to, b.to));
  return { nodes, edges, order };
}

function subDagOf(s: GraphInput): { subDag?: SubDagRef } {
  const ref = s.with ? subDagRef({ plugin: s.plugin, with: s.with }) : null;
  return ref ? { subDag: ref } : {};
}

function dotString(s: string): string {
  return `"${s.replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\n')}"`;
}

/**
 * Graphviz DOT: steps as boxes labelled with id and plugin (disabled ones dashed), a condition's
 * expression, a trigger rule, a map step's list and maxParallel, each precondition
 * (`<onViolation> unless <expression>`) and the child DAG a `dag` step runs on their own lines (a
 * map step drawn as a stack), in dispatch order.
 */
export function graphDot(name: string, steps: ReadonlyArray<GraphInput>): string {
  const g = graphJson(steps);
  const node = new Map(g.nodes.map((n) => [n.id, n]));
  const lines = [`digraph ${dotString(name)} {`, '  rankdir=LR;', '  node [shape=box, fontname="Helvetica"];'];
  for (const id of g.order) {
    const n = node.get(id)!;
    const style = (n.disabled ? ', style=dashed, fontcolor=gray40' : '') + (n.map ? ', shape=box3d' : '');
    const label = [
      n.id,
      n.plugin,
      ...(n.when ? [`when ${n.when}`] : []),
      ...(n.trigger ? [`trigger ${n.trigger}`] : []),
      ...(n.map ? [`map: ${n.map.replace(/^\$\{\{\s*([\s\S]*?)\s*\}\}$/, '$1')}`] : []),
      ...(n.maxParallel ? [`maxParallel ${n.maxParallel}`] : []),
      ...(n.preconditions?.expressions.map((x) => `${n.preconditions!.onViolation} unless ${x}`) ?? []),
      ...(n.subDag ? [`runs ${n.subDag.dag} v${n.subDag.version}`] : []),
    ];
    lines.push(`  ${dotString(n.id)} [label=${dotString(label.join('\n'))}${style}];`);
  }
  for (const e of g.edges)
    lines.push(`  ${dotString(e.from)} -> ${dotString(e.to)}${e.status ? ` [label=${dotString(e.status)}]` : ''};`);
  lines.push('}');
  return lines.join('\n') + '\n';
}
