import fc from 'fast-check';
import { findCycle, graphDot, graphJson, topologicalOrder, upstreamOf, type GraphStep } from './dag-graph';

const s = (id: string, ...dependsOn: string[]): GraphStep & { plugin: string } => ({ id, dependsOn, plugin: 'noop' });

describe('topologicalOrder', () => {
  it('breaks ties lexically by step id', () => {
    expect(topologicalOrder([s('c'), s('a'), s('b')])).toEqual(['a', 'b', 'c']);
  });

  it('places a step only after all its dependencies, smallest ready id first', () => {
    // z is ready at once; b waits for a; so the order is a, b (ready after a, smaller than z), z.
    expect(topologicalOrder([s('z'), s('b', 'a'), s('a')])).toEqual(['a', 'b', 'z']);
    expect(topologicalOrder([s('fetch'), s('parse', 'fetch'), s('store', 'parse', 'audit'), s('audit')])).toEqual([
      'audit',
      'fetch',
      'parse',
      'store',
    ]);
  });

  it('orders a diamond with the fan-out sorted', () => {
    const steps = [s('end', 'p3', 'p1', 'p2'), s('p2', 'start'), s('p1', 'start'), s('p3', 'start'), s('start')];
    expect(topologicalOrder(steps)).toEqual(['start', 'p1', 'p2', 'p3', 'end']);
  });

  it('compares ids by code unit, not locale', () => {
    expect(topologicalOrder([s('b'), s('B'), s('_a'), s('a')])).toEqual(['B', '_a', 'a', 'b']);
  });

  it('throws on a cycle and names it', () => {
    expect(() => topologicalOrder([s('a', 'c'), s('b', 'a'), s('c', 'b'), s('d')])).toThrow('a → c → b → a');
  });

  it('is a valid order independent of how the steps are listed (property)', () => {
    const dag = fc
      .integer({ min: 1, max: 30 })
      .chain((n) =>
        fc.tuple(
          fc.constant(n),
          fc.array(fc.tuple(fc.nat(n - 1), fc.nat(n - 1)), { maxLength: n * 3 }),
          fc.shuffledSubarray([...Array(n).keys()], { minLength: n, maxLength: n }),
        ),
      );
    fc.assert(
      fc.property(dag, ([n, pairs, perm]) => {
        const ids = [...Array(n).keys()].map((i) => `s${String(i).padStart(2, '0')}`);
        const deps = ids.map(() => new Set<string>());
        // Edges only from lower to higher index: acyclic by construction.
        for (const [x, y] of pairs) if (x < y) deps[y].add(ids[x]);
        const steps = ids.map((id, i) => s(id, ...deps[i]));
        const order = topologicalOrder(steps);
        expect(topologicalOrder(perm.map((i) => steps[i]))).toEqual(order);
        const pos = new Map(order.map((id, i) => [id, i]));
        for (const st of steps) for (const d of st.dependsOn) expect(pos.get(d)!).toBeLessThan(pos.get(st.id)!);
        expect(new Set(order).size).toBe(n);
      }),
    );
  });
});

describe('findCycle', () => {
  it('returns undefined for an acyclic graph', () => {
    expect(findCycle([s('a'), s('b', 'a'), s('c', 'a', 'b')])).toBeUndefined();
  });

  it('finds a self-dependency', () => {
    expect(findCycle([s('a'), s('b', 'b')])).toEqual(['b', 'b']);
  });

  it('starts the cycle at its smallest id and follows dependsOn', () => {
    expect(findCycle([s('x', 'y'), s('y', 'z'), s('z', 'x'), s('w', 'x')])).toEqual(['x', 'y', 'z', 'x']);
  });

  it('handles long chains without recursion', () => {
    const steps = Array.from({ length: 20_000 }, (_, i) => s(`s${i}`, ...(i > 0 ? [`s${i - 1}`] : ['s19999'])));
    expect(findCycle(steps)?.length).toBe(20_001);
  });
});

describe('upstreamOf', () => {
  it('collects transitive dependencies only', () => {
    const steps = [s('a'), s('b', 'a'), s('c', 'b'), s('d')];
    expect([...upstreamOf(steps, 'c')].sort()).toEqual(['a', 'b']);
    expect(upstreamOf(steps, 'a').size).toBe(0);
  });
});

describe('graph forms', () => {
  const steps = [s('load', 'fetch'), { ...s('fetch'), disabled: true }, s('say "hi"', 'load')];

  it('gives nodes, sorted edges and the dispatch order as JSON', () => {
    expect(graphJson(steps)).toEqual({
      nodes: [
        { id: 'fetch', plugin: 'noop', disabled: true },
        { id: 'load', plugin: 'noop', disabled: false },
        { id: 'say "hi"', plugin: 'noop', disabled: false },
      ],
      edges: [
        { from: 'fetch', to: 'load' },
        { from: 'load', to: 'say "hi"' },
      ],
      order: ['fetch', 'load', 'say "hi"'],
    });
  });

  it('writes DOT with quoted ids and edges', () => {
    const dot = graphDot('etl', steps);
    expect(dot).toContain('digraph "etl" {');
    expect(dot).toContain('"fetch" [label="fetch\\nnoop", style=dashed');
    expect(dot).toContain('"load" -> "say \\"hi\\"";');
    expect(dot.trimEnd().endsWith('}')).toBe(true);
  });
});
