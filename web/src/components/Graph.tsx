import type { ElkNode } from 'elkjs/lib/elk-api';
import { useEffect, useState } from 'preact/hooks';

export interface GraphNode {
  id: string;
  /** A state (step status) or 'definition' for a DAG version's graph; it picks the colour. */
  state: string;
  detail?: string;
}

export interface GraphEdge {
  from: string;
  to: string;
}

interface Point {
  x: number;
  y: number;
}

interface Laid {
  width: number;
  height: number;
  nodes: { id: string; x: number; y: number; w: number; h: number }[];
  /** Each edge as the points of its line, from its source's side to its target's. */
  edges: Point[][];
}

const NODE_H = 36;
const CHAR_W = 7.5;
/** An arrowhead's length and half its width, in px. */
const HEAD_L = 9;
const HEAD_W = 4.5;

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

const nodeWidth = (id: string) => Math.max(80, 24 + id.length * CHAR_W);

function columns(ids: string[], edges: GraphEdge[]): Laid {
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
  const cols: string[][] = [];
  for (const id of ids) (cols[depthOf(id)] ??= []).push(id);
  const colW = cols.map((c) => Math.max(...c.map(nodeWidth)));
  const pos = new Map<string, { x: number; y: number; w: number; h: number }>();
  let x = 12;
  cols.forEach((c, i) => {
    c.forEach((id, k) => pos.set(id, { x, y: 12 + k * (NODE_H + 20), w: nodeWidth(id), h: NODE_H }));
    x += colW[i] + 48;
  });
  const nodes = ids.map((id) => ({ id, ...pos.get(id)! }));
  return {
    width: x - 36,
    height: 12 + Math.max(...cols.map((c) => c.length)) * (NODE_H + 20),
    nodes,
    edges: edges.flatMap((e) => {
      const a = pos.get(e.from);
      const b = pos.get(e.to);
      if (!a || !b) return [];
      return [
        [
          { x: a.x + a.w, y: a.y + a.h / 2 },
          { x: b.x, y: b.y + b.h / 2 },
        ],
      ];
    }),
  };
}

async function layout(ids: string[], edges: GraphEdge[]): Promise<Laid> {
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
    children: ids.map((id) => ({ id, width: nodeWidth(id), height: NODE_H })),
    edges: edges.map((e, i) => ({ id: `e${String(i)}`, sources: [e.from], targets: [e.to] })),
  };
  const out = await (await loadElk()).layout(graph);
  return {
    width: out.width ?? 0,
    height: out.height ?? 0,
    nodes: (out.children ?? []).map((n) => ({ id: n.id, x: n.x ?? 0, y: n.y ?? 0, w: n.width ?? 0, h: n.height ?? 0 })),
    edges: (out.edges ?? []).flatMap((e) =>
      (e.sections ?? []).map((s) => [s.startPoint, ...(s.bendPoints ?? []), s.endPoint]),
    ),
  };
}

const num = (v: number) => String(Math.round(v * 10) / 10);
// Preact writes a style's numbers as they are: lengths carry their unit.
const px = (v: number) => `${num(v)}px`;

/**
 * Every edge's line as one path, and every arrowhead (a triangle at the line's end, along its
 * last segment) as another: two elements whatever the graph's size.
 */
function paths(edges: Point[][]): { lines: string; heads: string } {
  const lines: string[] = [];
  const heads: string[] = [];
  for (const pts of edges) {
    if (pts.length < 2) continue;
    lines.push(pts.map((p, i) => `${i ? 'L' : 'M'}${num(p.x)},${num(p.y)}`).join(''));
    const tip = pts[pts.length - 1];
    const from = pts[pts.length - 2];
    const len = Math.hypot(tip.x - from.x, tip.y - from.y) || 1;
    const ux = (tip.x - from.x) / len;
    const uy = (tip.y - from.y) / len;
    const bx = tip.x - ux * HEAD_L;
    const by = tip.y - uy * HEAD_L;
    heads.push(
      `M${num(tip.x)},${num(tip.y)}L${num(bx - uy * HEAD_W)},${num(by + ux * HEAD_W)}L${num(bx + uy * HEAD_W)},${num(by - ux * HEAD_W)}Z`,
    );
  }
  return { lines: lines.join(''), heads: heads.join('') };
}

interface GraphProps {
  label: string;
  nodes: GraphNode[];
  edges: GraphEdge[];
  selected?: string | null;
  onSelect?: (id: string) => void;
}

/**
 * A DAG laid out left to right: the edges drawn as one SVG beneath, each step an element placed
 * over it. A step is a button coloured by its state (the state is also in its accessible name);
 * choosing one calls onSelect. Without onSelect, a step is an image named by its id and detail.
 */
export function Graph(props: GraphProps) {
  const { nodes, edges, selected, onSelect } = props;
  const shape = JSON.stringify([nodes.map((n) => n.id), edges]);
  const [laid, setLaid] = useState<(Omit<Laid, 'edges'> & { lines: string; heads: string }) | null>(null);
  const [error, setError] = useState<string | null>(null);

  useEffect(() => {
    let stale = false;
    layout(
      nodes.map((n) => n.id),
      edges,
    ).then(
      (l) => !stale && setLaid({ nodes: l.nodes, width: l.width, height: l.height, ...paths(l.edges) }),
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
      <div
        class="graph-plane"
        role="group"
        aria-label={props.label}
        style={{ width: px(laid.width), height: px(laid.height) }}
      >
        <svg
          aria-hidden="true"
          width={laid.width}
          height={laid.height}
          viewBox={`0 0 ${String(laid.width)} ${String(laid.height)}`}
        >
          <path d={laid.lines} class="edge" />
          <path d={laid.heads} class="arrowhead" />
        </svg>
        {laid.nodes.map((n) => {
          const node = byId.get(n.id);
          const state = node?.state ?? 'pending';
          const place = { left: px(n.x), top: px(n.y), width: px(n.w), height: px(n.h) };
          if (!onSelect) {
            return (
              <div
                key={n.id}
                class={`node s-${state}`}
                style={place}
                data-step={n.id}
                data-state={state}
                role="img"
                aria-label={`${n.id}${node?.detail ? `: ${node.detail}` : ''}`}
              >
                {n.id}
              </div>
            );
          }
          return (
            <button
              key={n.id}
              type="button"
              class={`node s-${state}${selected === n.id ? ' selected' : ''}`}
              style={place}
              data-step={n.id}
              data-state={state}
              aria-label={`${n.id}: ${state}`}
              aria-pressed={selected === n.id}
              onClick={() => onSelect(n.id)}
            >
              {n.id}
            </button>
          );
        })}
      </div>
    </figure>
  );
}
