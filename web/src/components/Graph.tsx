import type { ElkNode } from 'elkjs/lib/elk-api';
import { useEffect, useState } from 'preact/hooks';

export interface GraphNode {
  id: string;
  /** A state (step status) or 'definition' for a DAG version's graph; it picks the colour. */
  state: string;
  detail?: string;
}

interface Laid {
  width: number;
  height: number;
  nodes: { id: string; x: number; y: number; w: number; h: number }[];
  edges: { id: string; d: string }[];
}

const NODE_H = 36;
const CHAR_W = 7.5;

// elkjs is about as large as the rest of the console together: it is loaded when a graph is first
// shown, and its layout is computed once per shape (nodes and edges), never on a state change.
let elk: Promise<{ layout(g: ElkNode): Promise<ElkNode> }> | undefined;
function loadElk() {
  elk ??= import('elkjs/lib/elk.bundled.js').then((m) => new m.default());
  return elk;
}

/**
 * elk's layered layout grows far faster than linearly and runs on the page's thread: past this
 * many steps a graph is drawn in columns by depth instead (a step's column is its longest path
 * from a root), linear in steps and edges, so a large run's page stays usable.
 */
const ELK_MAX_NODES = 200;

function columns(ids: string[], edges: { from: string; to: string }[]): Laid {
  const into = new Map<string, string[]>(ids.map((id) => [id, []]));
  for (const e of edges) into.get(e.to)?.push(e.from);
  const depth = new Map<string, number>();
  const depthOf = (id: string): number => {
    const known = depth.get(id);
    if (known !== undefined) return known;
    depth.set(id, 0);
    const d = Math.max(-1, ...(into.get(id) ?? []).map(depthOf)) + 1;
    depth.set(id, d);
    return d;
  };
  const width = (id: string) => Math.max(80, 24 + id.length * CHAR_W);
  const cols: string[][] = [];
  for (const id of ids) (cols[depthOf(id)] ??= []).push(id);
  const colW = cols.map((c) => Math.max(...c.map(width)));
  const pos = new Map<string, { x: number; y: number; w: number; h: number }>();
  let x = 12;
  cols.forEach((c, i) => {
    c.forEach((id, k) => pos.set(id, { x, y: 12 + k * (NODE_H + 20), w: width(id), h: NODE_H }));
    x += colW[i] + 48;
  });
  const nodes = ids.map((id) => ({ id, ...pos.get(id)! }));
  return {
    width: x - 36,
    height: 12 + Math.max(...cols.map((c) => c.length)) * (NODE_H + 20),
    nodes,
    edges: edges.flatMap((e, i) => {
      const a = pos.get(e.from);
      const b = pos.get(e.to);
      if (!a || !b) return [];
      return [
        {
          id: `e${String(i)}`,
          d: `M${String(a.x + a.w)},${String(a.y + a.h / 2)} L${String(b.x)},${String(b.y + b.h / 2)}`,
        },
      ];
    }),
  };
}

async function layout(ids: string[], edges: { from: string; to: string }[]): Promise<Laid> {
  if (ids.length > ELK_MAX_NODES) return columns(ids, edges);
  const graph: ElkNode = {
    id: 'root',
    layoutOptions: {
      'elk.algorithm': 'layered',
      'elk.direction': 'RIGHT',
      'elk.layered.spacing.nodeNodeBetweenLayers': '48',
      'elk.spacing.nodeNode': '20',
      'elk.edgeRouting': 'ORTHOGONAL',
    },
    children: ids.map((id) => ({ id, width: Math.max(80, 24 + id.length * CHAR_W), height: NODE_H })),
    edges: edges.map((e, i) => ({ id: `e${String(i)}`, sources: [e.from], targets: [e.to] })),
  };
  const out = await (await loadElk()).layout(graph);
  return {
    width: out.width ?? 0,
    height: out.height ?? 0,
    nodes: (out.children ?? []).map((n) => ({ id: n.id, x: n.x ?? 0, y: n.y ?? 0, w: n.width ?? 0, h: n.height ?? 0 })),
    edges: (out.edges ?? []).map((e) => ({
      id: e.id,
      d: (e.sections ?? [])
        .map((s) =>
          [s.startPoint, ...(s.bendPoints ?? []), s.endPoint]
            .map((p, i) => `${i ? 'L' : 'M'}${String(p.x)},${String(p.y)}`)
            .join(' '),
        )
        .join(' '),
    })),
  };
}

/**
 * A DAG laid out left to right. Each step is a focusable button coloured by its state (the state is
 * also in its accessible name); choosing one calls onSelect.
 */
export function Graph(props: {
  label: string;
  nodes: GraphNode[];
  edges: { from: string; to: string }[];
  selected?: string | null;
  onSelect?: (id: string) => void;
}) {
  const { nodes, edges, selected, onSelect } = props;
  const shape = JSON.stringify([nodes.map((n) => n.id), edges]);
  const [laid, setLaid] = useState<Laid | null>(null);
  const [error, setError] = useState<string | null>(null);

  useEffect(() => {
    let stale = false;
    layout(
      nodes.map((n) => n.id),
      edges,
    ).then(
      (l) => !stale && setLaid(l),
      (e: unknown) => !stale && setError(String(e)),
    );
    return () => {
      stale = true;
    };
    // The layout depends on the graph's shape only, not on the states.
  }, [shape]);

  if (error) return <p class="error">The graph could not be laid out: {error}</p>;
  if (!laid) return <p class="muted">Laying out the graph…</p>;
  const byId = new Map(nodes.map((n) => [n.id, n]));
  return (
    <figure class="graph">
      <svg
        role="group"
        aria-label={props.label}
        width={laid.width}
        height={laid.height}
        viewBox={`0 0 ${String(laid.width)} ${String(laid.height)}`}
      >
        <defs>
          <marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="6" markerHeight="6" orient="auto">
            <path d="M0,0 L10,5 L0,10 z" class="arrowhead" />
          </marker>
        </defs>
        {laid.edges.map((e) => (
          <path key={e.id} d={e.d} class="edge" marker-end="url(#arrow)" />
        ))}
        {laid.nodes.map((n) => {
          const node = byId.get(n.id);
          const state = node?.state ?? 'pending';
          const activate = () => onSelect?.(n.id);
          return (
            <g
              key={n.id}
              class={`node s-${state}${selected === n.id ? ' selected' : ''}`}
              transform={`translate(${String(n.x)},${String(n.y)})`}
              data-step={n.id}
              data-state={state}
              {...(onSelect
                ? {
                    role: 'button',
                    tabIndex: 0,
                    'aria-label': `${n.id}: ${state}`,
                    'aria-pressed': selected === n.id,
                    onClick: activate,
                    onKeyDown: (e: KeyboardEvent) => {
                      if (e.key === 'Enter' || e.key === ' ') {
                        e.preventDefault();
                        activate();
                      }
                    },
                  }
                : { role: 'img', 'aria-label': `${n.id}${node?.detail ? `: ${node.detail}` : ''}` })}
            >
              <rect width={n.w} height={n.h} rx="6" />
              <text x={n.w / 2} y={n.h / 2} dy="0.35em" text-anchor="middle">
                {n.id}
              </text>
            </g>
          );
        })}
      </svg>
    </figure>
  );
}
