import type { DagDefinitionInput } from '../dags/dag-definition';
import { chainPlan, nextLink, type ChainPlugins } from './chain';
import type { ClaimedWork } from './engine.store';

const plugins: ChainPlugins = {
  sideEffectFree: (p) => p === 'noop' || p === 'script',
  receivesRunData: (p) => p === 'script',
};

function claimed(stepId: string, over: Partial<ClaimedWork> = {}): ClaimedWork {
  return {
    tenantId: 't',
    runId: 'r',
    stepId,
    attempt: 1,
    epoch: 1,
    plugin: 'noop',
    config: {},
    spec: { retry: null, timeout: 1000, egress: [], constraints: null, disabled: false, concurrency: null },
    dagId: 'd',
    dagVersion: 1,
    traceId: 'a'.repeat(32),
    traceparent: `00-${'a'.repeat(32)}-${'b'.repeat(16)}-01`,
    dispatchSeq: 4,
    queuedAt: new Date(0),
    inputs: { x: 1 },
    upstream: {},
    needsData: true,
    ...over,
  };
}

const plan = (steps: DagDefinitionInput['steps']) => chainPlan({ id: 'd', steps });

/** Which step a worker may run right after another succeeded, before that result commits (the database checks again). */
describe('chain: the next link', () => {
  it('is the only dependent of the step, depending on it alone, with its outputs and the run inputs at hand', () => {
    const p = plan([
      { id: 'a', plugin: 'noop' },
      {
        id: 'b',
        plugin: 'noop',
        dependsOn: ['a'],
        with: { output: { v: '${{ steps.a.outputs.n }}', i: '${{ inputs.x }}' } },
      },
    ]);
    const next = nextLink(p, claimed('a'), { n: 5 }, true, plugins)!;
    expect(next).toMatchObject({
      stepId: 'b',
      attempt: 1,
      plugin: 'noop',
      dispatchSeq: 5,
      inputs: { x: 1 },
      upstream: { a: { outputs: { n: 5 } } },
      needsData: true,
      dependsOn: ['a'],
    });
    expect(next.traceparent).toMatch(new RegExp(`^00-${'a'.repeat(32)}-[0-9a-f]{16}-01$`));
    expect(next.traceparent).not.toBe(claimed('a').traceparent);
    // Without the run's inputs at hand, a step whose templates take them is not chained.
    expect(nextLink(p, claimed('a'), { n: 5 }, false, plugins)).toBeNull();
  });

  it('is none after a step with two dependents, or before a step with two dependencies', () => {
    const p = plan([
      { id: 'a', plugin: 'noop' },
      { id: 'b', plugin: 'noop', dependsOn: ['a'] },
      { id: 'c', plugin: 'noop', dependsOn: ['a'] },
      { id: 'j', plugin: 'noop', dependsOn: ['b', 'c'] },
    ]);
    expect(nextLink(p, claimed('a'), {}, true, plugins)).toBeNull();
    expect(nextLink(p, claimed('b'), {}, true, plugins)).toBeNull();
    expect(nextLink(p, claimed('j'), {}, true, plugins)).toBeNull();
  });

  it('is none for a step that could do anything but return its result, or that the engine holds back', () => {
    const after = (s: Omit<DagDefinitionInput['steps'][number], 'id' | 'dependsOn'>) =>
      nextLink(
        plan([
          { id: 'a', plugin: 'noop' },
          { id: 'b', dependsOn: ['a'], ...s },
        ]),
        claimed('a'),
        {},
        true,
        plugins,
      );
    expect(after({ plugin: 'noop' })?.stepId).toBe('b');
    expect(after({ plugin: 'http', with: { url: 'http://h.test/' } })).toBeNull();
    expect(after({ plugin: 'script', with: { code: 'return 1' } })?.stepId).toBe('b');
    expect(after({ plugin: 'script', with: { code: 'return 1' }, egress: ['h.test'] })).toBeNull();
    expect(after({ plugin: 'noop', disabled: true })).toBeNull();
    expect(after({ plugin: 'noop', concurrency: 1 })).toBeNull();
    expect(
      after({ plugin: 'noop', constraints: { maxExpectedRunTime: { after: 10, actions: [{ type: 'event' }] } } }),
    ).toBeNull();
    // A plugin that takes the run's data needs the inputs at hand.
    expect(
      nextLink(
        plan([
          { id: 'a', plugin: 'noop' },
          { id: 'b', plugin: 'script', dependsOn: ['a'], with: { code: 'return 1' } },
        ]),
        claimed('a'),
        {},
        false,
        plugins,
      ),
    ).toBeNull();
  });
});
