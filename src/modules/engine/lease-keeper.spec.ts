import { LeaseKeeper } from './lease-keeper';

describe('lease keeper', () => {
  const step = (stepId: string) => ({ tenantId: 't', runId: 'r', stepId, epoch: 1 });

  it('extends every held lease in one call and reports the ones no longer held', async () => {
    const asked: string[][] = [];
    const lost: string[][] = [];
    const keeper = new LeaseKeeper({
      heartbeat: async (items) => {
        asked.push(items.map((i) => i.stepId));
        return items.filter((i) => i.stepId !== 'b');
      },
      held: () => [step('a'), step('b'), step('c')],
      lost: (keys) => lost.push([...keys]),
      intervalMs: 1000,
      log: { warn: () => undefined },
    });
    await keeper.beat();
    expect(asked).toEqual([['a', 'b', 'c']]);
    expect(lost).toEqual([['t/r/b']]);
  });

  it('reports nothing lost when the heartbeat fails (the leases may still be held)', async () => {
    const lost: string[][] = [];
    const warned: string[] = [];
    const keeper = new LeaseKeeper({
      heartbeat: () => Promise.reject(new Error('connection lost')),
      held: () => [step('a')],
      lost: (keys) => lost.push([...keys]),
      intervalMs: 1000,
      log: { warn: (_o, msg) => warned.push(msg) },
    });
    await keeper.beat();
    expect(lost).toEqual([]);
    expect(warned).toEqual(['heartbeat failed']);
  });
});
