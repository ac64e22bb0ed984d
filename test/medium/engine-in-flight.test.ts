import pg from 'pg';
import { jsonArtifact } from '../../src/modules/artifacts/artifacts.repository';
import { ArtifactsRepository } from '../../src/modules/artifacts/artifacts.repository';
import { DagsRepository } from '../../src/modules/dags/dags.repository';
import { EngineRepository } from '../../src/modules/engine/engine.repository';
import { EngineStore, type ClaimedWork } from '../../src/modules/engine/engine.store';
import { RunsRepository } from '../../src/modules/runs/runs.repository';
import { RunsService } from '../../src/modules/runs/runs.service';
import { publishDagVersion } from '../support/publish-dag';
import { createTestDatabase, type TestDatabase } from '../support/test-database';

/**
 * Steps in flight are the tenant's leased queue items, counted where the cap is checked: no row
 * that every hop and claim of a tenant writes, so the hops of one tenant commit side by side and a
 * claim that serves a quiet tenant never waits for the busy tenant's transactions.
 */
describe('engine: steps in flight counted from the leases', () => {
  let t: TestDatabase;
  let owner: pg.Client;
  let first: pg.Client;
  let second: pg.Client;
  let store: EngineStore;
  let runs: RunsService;
  const opts = (capacity: number, tenantCap = 64) => ({ workerId: 'w', capacity, leaseMs: 60_000, tenantCap });

  /**
   * The input of ordo_engine_chain for `w`'s successful result, with no link: the hop for one result.
   * Its outputs name its run (two inserts of one new artifact wait for each other).
   */
  function hopInput(w: ClaimedWork, cap = 64): string {
    const outputs = { run: w.runId };
    const out = jsonArtifact(w.tenantId, outputs);
    return JSON.stringify({
      worker: 'w',
      leaseMs: 60_000,
      capacity: 4,
      cap,
      head: {
        tenant_id: w.tenantId,
        run_id: w.runId,
        step_id: w.stepId,
        attempt: w.attempt,
        epoch: w.epoch,
        status: 'succeeded',
        outputs,
        outputs_hash: out.sha256,
        logs_hash: null,
        ord: 1,
      },
      artifacts: [{ tenant_id: w.tenantId, sha256: out.sha256, media_type: out.mediaType, body: out.json }],
    });
  }

  /** Runs `text` on `c` in a transaction left open, failing rather than waiting over a second for a lock. */
  async function openTransaction(c: pg.Client, text: string, values: unknown[]): Promise<pg.QueryResult> {
    await c.query(`begin; set local lock_timeout = '1s'`);
    return c.query(text, values);
  }

  beforeAll(async () => {
    t = await createTestDatabase();
    owner = new pg.Client({ connectionString: t.ownerUrl });
    first = new pg.Client({ connectionString: t.systemUrl });
    second = new pg.Client({ connectionString: t.systemUrl });
    await Promise.all([owner.connect(), first.connect(), second.connect()]);
    await owner.query(`insert into tenant (id, name) values ('busy', 'B'), ('quiet', 'Q'), ('capped', 'C')`);
    store = new EngineStore(t.db, new EngineRepository(), new ArtifactsRepository());
    runs = new RunsService(t.db, new RunsRepository(), new DagsRepository());
    for (const tenant of ['busy', 'quiet', 'capped']) {
      await publishDagVersion(t.db, tenant, { id: 'one', steps: [{ id: 'x', plugin: 'noop' }] });
      await publishDagVersion(t.db, tenant, {
        id: 'two',
        steps: [
          { id: 'a', plugin: 'noop' },
          { id: 'b', plugin: 'noop', dependsOn: ['a'] },
        ],
      });
    }
  });
  afterAll(async () => {
    for (const c of [first, second]) await c.query('rollback').catch(() => undefined);
    await Promise.all([first.end(), second.end(), owner.end()]);
    await t.drop();
  });
  afterEach(async () => {
    for (const c of [first, second]) await c.query('rollback');
    await owner.query(`delete from queue_item where step_id = 'elsewhere'`);
  });

  it('commits two hops of one tenant side by side: neither waits for the other', async () => {
    await runs.createRuns(
      'busy',
      ['h1', 'h2'].map((runToken) => ({ dagId: 'one', inputs: {}, runToken, requestedBy: 'me' })),
    );
    const [w1, w2] = await store.cycle([], opts(2));
    // Each ends its run and frees a slot; the first is not committed yet.
    await openTransaction(first, 'select kind, item from ordo_engine_chain($1::jsonb)', [hopInput(w1)]);
    const r = await openTransaction(second, 'select kind, item from ordo_engine_chain($1::jsonb)', [hopInput(w2)]);
    expect(
      r.rows.filter((x: { kind: string }) => x.kind === 'event').map((x: { item: { type: string } }) => x.item.type),
    ).toEqual(['run.succeeded']);
    await Promise.all([first.query('commit'), second.query('commit')]);
    const done = await owner.query(`select status from run where run_id = any($1) order by status`, [
      [w1.runId, w2.runId],
    ]);
    expect(done.rows).toEqual([{ status: 'succeeded' }, { status: 'succeeded' }]);
  });

  it('serves a quiet tenant beside a busy one without waiting for a claim of the busy tenant', async () => {
    await runs.createRuns(
      'busy',
      ['c1', 'c2'].map((runToken) => ({ dagId: 'one', inputs: {}, runToken, requestedBy: 'me' })),
    );
    const quiet = await runs.createRun('quiet', { dagId: 'one', inputs: {}, runToken: 'q1', requestedBy: 'me' });
    const claim = (capacity: number, only?: string[]) =>
      JSON.stringify({ worker: 'w', leaseMs: 60_000, capacity, cap: 64, skipLocked: false, ...(only ? { only } : {}) });
    // A claim of the busy tenant, not committed: it holds its queue row (served_at) and one item.
    const busy = await openTransaction(first, 'select kind, item from ordo_engine_claim($1::jsonb)', [
      claim(1, ['busy']),
    ]);
    expect(busy.rows.filter((x: { kind: string }) => x.kind === 'dispatch')).toHaveLength(1);
    const both = await openTransaction(second, 'select kind, item from ordo_engine_claim($1::jsonb)', [claim(8)]);
    const got = both.rows
      .filter((x: { kind: string }) => x.kind === 'dispatch')
      .map((x: { item: { tenant_id: string; run_id: string } }) => x.item.tenant_id)
      .sort();
    expect(got).toEqual(['busy', 'quiet']);
    await Promise.all([first.query('commit'), second.query('commit')]);
    const steps = await owner.query(`select status from step where tenant_id = 'quiet' and run_id = $1`, [quiet.runId]);
    expect(steps.rows).toEqual([{ status: 'running' }]);
  });

  it("counts the tenant's leased items against its cap when a hop dispatches successors", async () => {
    const run = await runs.createRun('capped', { dagId: 'two', inputs: {}, runToken: 'cap', requestedBy: 'me' });
    const [a] = await store.claimNow({ ...opts(4, 2), onlyTenants: ['capped'] });
    expect(a.stepId).toBe('a');
    // Two steps of the tenant run elsewhere: with a's slot freed, the tenant is at its cap of 2.
    for (let i = 0; i < 2; i++)
      await owner.query(
        `insert into queue_item (tenant_id, run_id, step_id, state, worker_id, epoch, lease_expires_at)
         values ('capped', gen_random_uuid(), 'elsewhere', 'leased', 'w2', 1, now() + interval '1 hour')`,
      );
    const r = await first.query('select kind, item from ordo_engine_chain($1::jsonb)', [hopInput(a, 2)]);
    expect(r.rows.filter((x: { kind: string }) => x.kind === 'dispatch')).toEqual([]);
    const q = await owner.query(`select step_id, state from queue_item where run_id = $1`, [run.runId]);
    expect(q.rows).toEqual([{ step_id: 'b', state: 'ready' }]);
  });
});
