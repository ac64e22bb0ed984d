import { dagDefinition } from '../dags/dag-definition';
import type { JsonValue } from '../plugins/plugin';
import { descendants, planRun, type ReusedOutputs } from './run-plan';

const def = dagDefinition.parse({
  id: 'p',
  steps: [
    { id: 'b', plugin: 'noop' },
    { id: 'a', plugin: 'noop' },
    { id: 'off', plugin: 'noop', disabled: true },
    { id: 'c', plugin: 'noop', dependsOn: ['a', 'off'] },
    { id: 'd', plugin: 'noop', dependsOn: ['c', 'b'] },
  ],
});

describe('planRun', () => {
  it('queues roots, skips disabled roots and counts only unfinished dependencies', () => {
    const plan = planRun(def);
    expect(plan.map((s) => [s.stepId, s.topoIndex, s.status, s.pendingDeps, s.reason])).toEqual([
      ['a', 0, 'queued', 0, null],
      ['b', 1, 'queued', 0, null],
      ['off', 2, 'skipped', 0, 'disabled'],
      ['c', 3, 'pending', 1, null],
      ['d', 4, 'pending', 2, null],
    ]);
  });

  it('marks reused steps of a rerun succeeded with their outputs and queues what follows them', () => {
    const reuse: ReusedOutputs = new Map<string, { outputs: JsonValue; outputsHash: string | null }>([
      ['a', { outputs: { x: 1 }, outputsHash: 'h-a' }],
      ['b', { outputs: {}, outputsHash: 'h-b' }],
    ]);
    const plan = planRun(def, reuse);
    const by = new Map(plan.map((s) => [s.stepId, s]));
    expect(by.get('a')).toMatchObject({ status: 'succeeded', fromRerun: true, outputs: { x: 1 }, outputsHash: 'h-a' });
    expect(by.get('c')).toMatchObject({ status: 'queued', pendingDeps: 0 });
    expect(by.get('d')).toMatchObject({ status: 'pending', pendingDeps: 1 });
  });

  it('finds every step downstream of a step', () => {
    expect([...descendants(def.steps, 'a')].sort()).toEqual(['c', 'd']);
    expect([...descendants(def.steps, 'd')]).toEqual([]);
  });
});
