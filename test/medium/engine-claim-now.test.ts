import pg from 'pg';
import { ArtifactsRepository } from '../../src/modules/artifacts/artifacts.repository';
import type { DagDefinitionInput } from '../../src/modules/dags/dag-definition';
import { DagsRepository } from '../../src/modules/dags/dags.repository';
import { EngineRepository } from '../../src/modules/engine/engine.repository';
import { EngineStore, type ClaimedWork } from '../../src/modules/engine/engine.store';
import { RunsRepository } from '../../src/modules/runs/runs.repository';
import { RunsService } from '../../src/modules/runs/runs.service';
import { succeeded } from '../support/completions';
import { publishDagVersion } from '../support/publish-dag';
import { createTestDatabase, type TestDatabase } from '../support/test-database';

describe('engine: a claim that does not wait for a running cycle', () => {
  let t: TestDatabase;
  let owner: pg.Client;
  let holder: pg.Client;
  let store: EngineStore;
  let runs: RunsService;
  const opts = (capacity: number) => ({ workerId: 'w', capacity, leaseMs: 60_000, tenantCap: 64 });
  const done = (w: ClaimedWork) => succeeded(w);

  const publish = (tenantId: string, input: DagDefinitionInput) => publishDagVersion(t.db, tenantId, input);

  beforeAll(async () => {
    t = await createTestDatabase();
    owner = new pg.Client({ connectionString: t.ownerUrl });
    await owner.connect();
    holder = new pg.Client({ connectionString: t.ownerUrl });
    await holder.connect();
    await owner.query(`insert into tenant (id, name) values ('busy', 'B'), ('quiet', 'Q'), ('capped', 'C')`);
    store = new EngineStore(t.db, new EngineRepository(), new ArtifactsRepository());
    runs = new RunsService(t.db, new RunsRepository(), new DagsRepository());
    await publish('busy', { id: 'one', steps: [{ id: 'x', plugin: 'noop' }] });
    await publish('quiet', { id: 'one', steps: [{ id: 'x', plugin: 'noop' }] });
    await publish('capped', { id: 'one', steps: [{ id: 'x', plugin: 'noop' }] });
  });
  afterAll(async () => {
    await holder.end().catch(() => undefined);
    await owner.end();
    await t.drop();
  });

  it("skips a tenant whose queue another transaction holds, claims the other tenant's step at once and leaves the skipped work queued", async () => {
    const busy = await runs.createRuns(
      'busy',
      Array.from({ length: 5 }, (_, i) => ({ dagId: 'one', inputs: {}, runToken: `b${i}`, requestedBy: 'me' })),
    );
    const quiet = await runs.createRun('quiet', { dagId: 'one', inputs: {}, runToken: 'q', requestedBy: 'me' });
    // A cycle applying the busy tenant's batch holds its queue row until it commits.
    await holder.query('begin');
    await holder.query(`select 1 from tenant_queue where tenant_id = 'busy' for update`);
    const claimed = await store.claimNow(opts(8));
    expect(claimed.map((w) => [w.tenantId, w.runId])).toEqual([['quiet', quiet.runId]]);
    const steps = (
      await owner.query<{ status: string }>(`select status from step where tenant_id = 'quiet' and run_id = $1`, [
        quiet.runId,
      ])
    ).rows;
    expect(steps).toEqual([{ status: 'running' }]);
    const events = (
      await owner.query<{ type: string }>(`select type from run_event where run_id = $1 order by seq`, [quiet.runId])
    ).rows.map((r) => r.type);
    expect(events.slice(-2)).toEqual(['run.running', 'step.running']);
    await holder.query('rollback');
    const ready = (
      await owner.query<{ n: number }>(
        `select count(*)::int n from queue_item where tenant_id = 'busy' and state = 'ready'`,
      )
    ).rows[0].n;
    expect(ready).toBe(busy.length);
    // The busy tenant's steps are claimed by the next cycle once its queue is free.
    const next = await store.cycle(claimed.map(done), opts(8));
    expect(next.map((w) => w.tenantId)).toEqual(Array(5).fill('busy'));
    await store.cycle(next.map(done), opts(0));
    const open = (await owner.query<{ n: number }>(`select count(*)::int n from run where status not in ('succeeded')`))
      .rows[0].n;
    expect(open).toBe(0);
  });

  it('skips a run another transaction holds and leaves its step queued', async () => {
    const r = await runs.createRun('quiet', { dagId: 'one', inputs: {}, runToken: 'held', requestedBy: 'me' });
    await holder.query('begin');
    await holder.query(`select 1 from run where run_id = $1 for update`, [r.runId]);
    expect(await store.claimNow(opts(8))).toEqual([]);
    await holder.query('rollback');
    const items = (await owner.query<{ state: string }>(`select state from queue_item where run_id = $1`, [r.runId]))
      .rows;
    expect(items).toEqual([{ state: 'ready' }]);
    // Tenants the running cycle serves are left to it.
    expect(await store.claimNow({ ...opts(8), excludeTenants: ['quiet'] })).toEqual([]);
    const [w] = await store.claimNow(opts(8));
    expect(w.runId).toBe(r.runId);
    await store.cycle([done(w)], opts(0));
  });

  it('claims only for the tenants it is given, leaving older ready steps of others queued', async () => {
    const older = await runs.createRun('busy', { dagId: 'one', inputs: {}, runToken: 'only-b', requestedBy: 'me' });
    const mine = await runs.createRun('quiet', { dagId: 'one', inputs: {}, runToken: 'only-q', requestedBy: 'me' });
    const claimed = await store.claimNow({ ...opts(8), onlyTenants: ['quiet'] });
    expect(claimed.map((w) => w.runId)).toEqual([mine.runId]);
    const items = (
      await owner.query<{ state: string }>(`select state from queue_item where run_id = $1`, [older.runId])
    ).rows;
    expect(items).toEqual([{ state: 'ready' }]);
    const [w] = await store.claimNow({ ...opts(8), onlyTenants: ['busy'] });
    expect(w.runId).toBe(older.runId);
    await store.cycle([...claimed, w].map(done), opts(0));
  });

  it('announces the slots a tenant at its in-flight cap frees while it still has ready steps, and only then', async () => {
    const listener = new pg.Client({ connectionString: t.ownerUrl });
    await listener.connect();
    const heard: string[] = [];
    listener.on('notification', (n) => heard.push(n.payload ?? ''));
    await listener.query('listen ordo_ready');
    const capped = { ...opts(8), tenantCap: 2 };
    const settle = () => new Promise((r) => setTimeout(r, 300));
    try {
      await runs.createRuns(
        'capped',
        Array.from({ length: 4 }, (_, i) => ({ dagId: 'one', inputs: {}, runToken: `c${i}`, requestedBy: 'me' })),
      );
      // The cap leaves two of the four steps queued.
      const first = await store.claimNow({ ...capped, excludeTenants: ['busy', 'quiet'] });
      expect(first).toHaveLength(2);
      await settle();
      heard.length = 0;
      // Their results free both slots while two steps are still ready: announced, so a worker claims them now.
      expect(await store.advance(first.map(done), capped)).toEqual([]);
      await settle();
      expect(heard).toContain('capped');
      const second = await store.claimNow({ ...capped, excludeTenants: ['busy', 'quiet'] });
      expect(second).toHaveLength(2);
      await settle();
      heard.length = 0;
      // Nothing left to claim: freed slots are not announced.
      expect(await store.advance(second.map(done), capped)).toEqual([]);
      await settle();
      expect(heard).not.toContain('capped');
    } finally {
      await listener.end();
    }
  });
});
