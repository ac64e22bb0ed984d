import type { ClaimedWork, SideClaimOptions } from './engine.store';
import { EngineProfile } from './engine-profile';
import { SideClaims } from './side-claims';

/** The claims a worker sends on the side for tenants it is woken for (the scheduling only; the claim itself is tested in test/medium). */
describe('claims on the side', () => {
  const calls: {
    only: string[] | undefined;
    exclude: string[] | undefined;
    capacity: number;
    settle: (w: ClaimedWork[]) => void;
  }[] = [];
  const claimed: ClaimedWork[][] = [];
  let roomLeft = 100;
  const side = new SideClaims({
    claim: (o: SideClaimOptions) =>
      new Promise<ClaimedWork[]>((settle) =>
        calls.push({ only: o.onlyTenants, exclude: o.excludeTenants, capacity: o.capacity, settle }),
      ),
    options: (capacity) => ({ workerId: 'w', capacity, leaseMs: 1000, tenantCap: 8 }),
    // Up to 4 per claim (the worker's concurrency), within what is left.
    room: (reserved) => Math.min(4, roomLeft - reserved),
    serving: () => ['served'],
    claimed: (work) => claimed.push(work),
    stopping: () => false,
    profile: new EngineProfile(false),
    log: { warn: () => undefined },
  });
  const tick = () => new Promise((r) => setImmediate(r));

  it("claims for each woken tenant at once, two claims at a time, and does not hold one tenant's claim behind another's", async () => {
    side.request('busy');
    side.request('quiet');
    expect(calls.map((c) => c.only)).toEqual([['busy'], ['quiet']]);
    // Two under way: the next tenants wait, and are claimed for together when one ends.
    side.request('a');
    side.request('b');
    expect(calls).toHaveLength(2);
    // A tenant whose claim is under way is claimed for again after it, not beside it.
    side.request('busy');
    calls[1].settle([]);
    await tick();
    expect(calls.map((c) => c.only)).toEqual([['busy'], ['quiet'], ['a', 'b']]);
    calls[0].settle([{ stepId: 'x' } as ClaimedWork]);
    await tick();
    expect(calls.map((c) => c.only)).toEqual([['busy'], ['quiet'], ['a', 'b'], ['busy']]);
    expect(calls.map((c) => c.capacity)).toEqual([4, 4, 4, 4]);
    // What the worker's turn serves is left to it; what a claim took goes to the worker.
    expect(calls.every((c) => c.exclude?.join() === 'served')).toBe(true);
    expect(claimed).toEqual([[{ stepId: 'x' }]]);
    calls[2].settle([]);
    calls[3].settle([]);
    await side.settled();
    expect(calls).toHaveLength(4);
  });

  it('leaves woken tenants to the next turn when there is no room', async () => {
    roomLeft = 0;
    side.request('late');
    await tick();
    expect(calls).toHaveLength(4);
    roomLeft = 100;
    side.request();
    expect(calls).toHaveLength(4);
  });
});
