import pg from 'pg';
import { ArtifactsRepository } from '../../src/modules/artifacts/artifacts.repository';
import { DagsRepository } from '../../src/modules/dags/dags.repository';
import { EngineRepository } from '../../src/modules/engine/engine.repository';
import { EngineStore } from '../../src/modules/engine/engine.store';
import { RunsRepository } from '../../src/modules/runs/runs.repository';
import { RunsService } from '../../src/modules/runs/runs.service';
import { succeeded } from '../support/completions';
import { publishDagVersion } from '../support/publish-dag';
import { createTestDatabase, type TestDatabase } from '../support/test-database';

/** The claim under a step's `concurrency` limit (db/functions/ordo_engine_claim.sql), with claims in open transactions. */
describe('engine: step concurrency gates', () => {
  let t: TestDatabase;
  let owner: pg.Client;
  let holder: pg.Client;
  let other: pg.Client;
  let store: EngineStore;
  let runs: RunsService;
  const opts = (capacity: number) => ({ workerId: 'w', capacity, leaseMs: 60_000, tenantCap: 64 });
  const claimIn = async (c: pg.Client, capacity: number, skipLocked = false) => {
    const r = await c.query<{ kind: string; item: { run_id: string; step_id: string } }>(
      'select kind, item from ordo_engine_claim($1::jsonb)',
      [JSON.stringify({ worker: 'w', leaseMs: 60_000, capacity, cap: 64, skipLocked })],
    );
    return r.rows.filter((x) => x.kind === 'dispatch').map((x) => x.item);
  };
  const leased = async (gate: string) =>
    (
      await owner.query<{ n: number }>(
        `select count(*)::int n from queue_item where tenant_id = 'gt' and gate = $1 and state = 'leased'`,
        [gate],
      )
    ).rows[0].n;

  beforeAll(async () => {
    t = await createTestDatabase();
    owner = new pg.Client({ connectionString: t.ownerUrl });
    holder = new pg.Client({ connectionString: t.ownerUrl });
    other = new pg.Client({ connectionString: t.ownerUrl });
    await Promise.all([owner.connect(), holder.connect(), other.connect()]);
    await owner.query(`insert into tenant (id, name) values ('gt', 'G'), ('gu', 'U')`);
    store = new EngineStore(t.db, new EngineRepository(), new ArtifactsRepository());
    runs = new RunsService(t.db, new RunsRepository(), new DagsRepository());
    await publishDagVersion(t.db, 'gt', { id: 'lim', steps: [{ id: 'x', plugin: 'noop', concurrency: 2 }] });
    await publishDagVersion(t.db, 'gt', { id: 'free', steps: [{ id: 'y', plugin: 'noop' }] });
    await publishDagVersion(t.db, 'gu', { id: 'lim', steps: [{ id: 'x', plugin: 'noop', concurrency: 2 }] });
  });
  afterAll(async () => {
    await Promise.all([holder, other].map((c) => c.end().catch(() => undefined)));
    await owner.end();
    await t.drop();
  });

  it('queues a limited step under its gate, lets two claims share its slots without passing the limit, and frees a slot with each result', async () => {
    const limited = await runs.createRuns(
      'gt',
      Array.from({ length: 5 }, (_, i) => ({ dagId: 'lim', inputs: {}, runToken: `l${i}`, requestedBy: 'me' })),
    );
    const free = await runs.createRun('gt', { dagId: 'free', inputs: {}, runToken: 'f', requestedBy: 'me' });
    const items = (
      await owner.query<{ gate: string | null; gate_limit: number | null }>(
        `select gate, gate_limit from queue_item where tenant_id = 'gt' order by id`,
      )
    ).rows;
    expect(items).toEqual([...Array(5).fill({ gate: 'lim/x', gate_limit: 2 }), { gate: null, gate_limit: null }]);

    // While another transaction holds the gate, a claim that skips locked work passes over the
    // limited steps to the tenant's other step.
    await holder.query('begin');
    await holder.query(`select pg_advisory_xact_lock(hashtextextended('ordo.gate/gt/lim/x', 0))`);
    const now = await store.claimNow(opts(8));
    expect(now.map((w) => [w.runId, w.stepId])).toEqual([[free.runId, 'y']]);
    await holder.query('commit');

    // A claim in an open transaction takes the first limited step and holds the gate.
    await holder.query('begin');
    expect((await claimIn(holder, 1)).map((w) => [w.run_id, w.step_id])).toEqual([[limited[0].runId, 'x']]);

    // A claim that waits for the gate counts the holder's step once it commits: one slot is left.
    await other.query('begin');
    let settled = false;
    const waiting = claimIn(other, 8).finally(() => (settled = true));
    await new Promise((r) => setTimeout(r, 300));
    expect(settled).toBe(false);
    await holder.query('commit');
    const second = await waiting;
    await other.query('commit');
    expect(second.map((w) => [w.run_id, w.step_id])).toEqual([[limited[1].runId, 'x']]);
    expect(await leased('lim/x')).toBe(2);

    // Full: nothing more is claimed, and the three steps left stay queued.
    expect(await claimIn(owner, 8)).toEqual([]);

    // A result frees a slot: the turn that applies it claims exactly one more limited step.
    const running = (
      await owner.query<{ epoch: number; attempts: number }>(
        `select epoch, attempts from step where tenant_id = 'gt' and run_id = $1 and step_id = 'x'`,
        [limited[0].runId],
      )
    ).rows[0];
    const next = await store.cycle(
      [
        succeeded({
          tenantId: 'gt',
          runId: limited[0].runId,
          stepId: 'x',
          attempt: running.attempts,
          epoch: running.epoch,
        }),
      ],
      opts(8),
    );
    expect(next.map((x) => [x.runId, x.stepId])).toEqual([[limited[2].runId, 'x']]);
    expect(await leased('lim/x')).toBe(2);
    const queued = (
      await owner.query<{ n: number }>(
        `select count(*)::int n from queue_item where tenant_id = 'gt' and state = 'ready'`,
      )
    ).rows[0].n;
    expect(queued).toBe(2);
  });

  it("keeps one tenant's gate apart from another tenant's DAG of the same id", async () => {
    // Tenant gt's gate lim/x is full (two leased from the test above); tenant gu's is its own.
    expect(await leased('lim/x')).toBe(2);
    const mine = await runs.createRuns(
      'gu',
      Array.from({ length: 3 }, (_, i) => ({ dagId: 'lim', inputs: {}, runToken: `u${i}`, requestedBy: 'me' })),
    );
    const claimed = await store.claimNow({ ...opts(8), onlyTenants: ['gu'] });
    expect(claimed.map((w) => [w.tenantId, w.runId])).toEqual(mine.slice(0, 2).map((r) => ['gu', r.runId]));
    expect(await leased('lim/x')).toBe(2);
    // And gt's full gate still holds its own steps back.
    expect(await store.claimNow({ ...opts(8), onlyTenants: ['gt'] })).toEqual([]);
  });

  it("passes over a full gate without reading the steps that wait under it, and holds each waiting step to its own version's limit", async () => {
    await owner.query(`insert into tenant (id, name) values ('gv', 'V')`);
    await publishDagVersion(t.db, 'gv', { id: 'one', steps: [{ id: 'x', plugin: 'noop', concurrency: 1 }] });
    await publishDagVersion(t.db, 'gv', { id: 'free', steps: [{ id: 'y', plugin: 'noop' }] });
    const waiting = await runs.createRuns(
      'gv',
      Array.from({ length: 2_000 }, (_, i) => ({ dagId: 'one', inputs: {}, runToken: `w${i}`, requestedBy: 'me' })),
    );
    const first = await store.claimNow({ ...opts(8), onlyTenants: ['gv'] });
    expect(first.map((w) => w.runId)).toEqual([waiting[0].runId]);
    // Version 2 of the DAG allows two at once: its step, queued behind the 1,999 that wait under
    // version 1's limit, shares the gate (one slot left for it), then the tenant's other step.
    await publishDagVersion(t.db, 'gv', { id: 'one', steps: [{ id: 'x', plugin: 'noop', concurrency: 2 }] });
    const v2 = await runs.createRun('gv', { dagId: 'one', inputs: {}, runToken: 'v2', requestedBy: 'me' });
    const free = await runs.createRun('gv', { dagId: 'free', inputs: {}, runToken: 'f', requestedBy: 'me' });
    await owner.query('begin');
    try {
      const r = await owner.query<{ kind: string; item: { run_id: string; step_id: string } }>(
        'select kind, item from ordo_engine_claim($1::jsonb)',
        [JSON.stringify({ worker: 'w', leaseMs: 60_000, capacity: 8, cap: 64, only: ['gv'] })],
      );
      const taken = r.rows.filter((x) => x.kind === 'dispatch').map((x) => [x.item.run_id, x.item.step_id]);
      expect(taken).toEqual([
        [v2.runId, 'x'],
        [free.runId, 'y'],
      ]);
      // The queue rows this claim read (this transaction's counters): a few dozen, not the 1,999.
      const read = (
        await owner.query<{ n: number }>(
          `select (coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0))::int n
           from pg_stat_xact_user_tables where relname = 'queue_item'`,
        )
      ).rows[0].n;
      expect(read).toBeLessThan(100);
      await owner.query('commit');
    } catch (e) {
      await owner.query('rollback');
      throw e;
    }
    // Now full for both versions' steps.
    expect(await store.claimNow({ ...opts(8), onlyTenants: ['gv'] })).toEqual([]);
    expect(
      (
        await owner.query<{ n: number }>(
          `select count(*)::int n from queue_item where tenant_id = 'gv' and state = 'ready'`,
        )
      ).rows[0].n,
    ).toBe(1_999);
  });
});
