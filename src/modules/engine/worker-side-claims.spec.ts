import { loadConfig } from '../../core/config/config';
import type { Database } from '../../core/database/database';
import type { PluginRegistry } from '../plugins/plugin-registry';
import type { SandboxService } from '../sandbox/sandbox.module';
import type { SecretsService } from '../secrets/secrets.service';
import type { ConstraintsService } from './constraints.service';
import type { ClaimedWork, EngineStore, SideClaimOptions } from './engine.store';
import { WorkerService } from './worker.service';

/** The claims a worker sends on the side for tenants it is woken for (the scheduling only; the claim itself is tested in test/medium). */
describe('worker: claims on the side', () => {
  const calls: { only: string[] | undefined; capacity: number; settle: (w: ClaimedWork[]) => void }[] = [];
  const store = {
    claimNow: (o: SideClaimOptions) =>
      new Promise<ClaimedWork[]>((settle) => calls.push({ only: o.onlyTenants, capacity: o.capacity, settle })),
  } as unknown as EngineStore;
  const worker = new WorkerService(
    loadConfig({ ORDO_WORKER_CONCURRENCY: '4' }),
    {} as Database,
    store,
    {} as PluginRegistry,
    {} as ConstraintsService,
    {} as SecretsService,
    {} as SandboxService,
  );
  const wake = (tenant: string) => (worker as unknown as { claimNow(t: string): void }).claimNow(tenant);
  const tick = () => new Promise((r) => setImmediate(r));

  it("claims for each woken tenant at once, two claims at a time, and does not hold one tenant's claim behind another's", async () => {
    wake('busy');
    wake('quiet');
    expect(calls.map((c) => c.only)).toEqual([['busy'], ['quiet']]);
    // Two under way: the next tenants wait, and are claimed for together when one ends.
    wake('a');
    wake('b');
    expect(calls).toHaveLength(2);
    // A tenant whose claim is under way is claimed for again after it, not beside it.
    wake('busy');
    calls[1].settle([]);
    await tick();
    expect(calls.map((c) => c.only)).toEqual([['busy'], ['quiet'], ['a', 'b']]);
    calls[0].settle([]);
    await tick();
    expect(calls.map((c) => c.only)).toEqual([['busy'], ['quiet'], ['a', 'b'], ['busy']]);
    // Each is given room for up to the worker's concurrency (beyond its prefetch of 8 x 4).
    expect(calls.map((c) => c.capacity)).toEqual([4, 4, 4, 4]);
    calls[2].settle([]);
    calls[3].settle([]);
    await tick();
    expect(calls).toHaveLength(4);
  });
});
