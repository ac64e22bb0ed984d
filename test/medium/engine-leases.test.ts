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

describe('engine: leases, fencing, reaper, fairness', () => {
  let t: TestDatabase;
  let owner: pg.Client;
  let store: EngineStore;
  let runs: RunsService;
  const opts = (workerId: string, capacity = 16) => ({ workerId, capacity, leaseMs: 60_000, tenantCap: 64 });
  const done = (w: ClaimedWork, workerId: string) => succeeded(w, workerId, { by: workerId });

  const publish = (tenantId: string, input: DagDefinitionInput) => publishDagVersion(t.db, tenantId, input);
  const q = async <T extends pg.QueryResultRow>(text: string, values: unknown[] = []) =>
    (await owner.query<T>(text, values)).rows;

  beforeAll(async () => {
    t = await createTestDatabase();
    owner = new pg.Client({ connectionString: t.ownerUrl });
    await owner.connect();
    await owner.query(`insert into tenant (id, name) values ('ta', 'A'), ('tb', 'B')`);
    store = new EngineStore(t.db, new EngineRepository(), new ArtifactsRepository());
    runs = new RunsService(t.db, new RunsRepository(), new DagsRepository());
    await publish('ta', {
      id: 'one',
      steps: [{ id: 'x', plugin: 'noop', retry: { maxRetries: 1, initialDelay: 10 } }],
    });
    await publish('ta', { id: 'single', steps: [{ id: 'x', plugin: 'noop' }] });
    await publish('tb', { id: 'one', steps: [{ id: 'x', plugin: 'noop' }] });
  });
  afterAll(async () => {
    await owner.end();
    await t.drop();
  });

  it('rejects a fenced-out result, records it, and applies only the current attempt', async () => {
    const { runId } = await runs.createRun('ta', { dagId: 'one', inputs: {}, runToken: 'fence', requestedBy: 'me' });
    const [a] = await store.cycle([], opts('worker-a'));
    expect(a).toMatchObject({ runId, stepId: 'x', attempt: 1, epoch: 1 });
    // A live lease is never taken.
    expect(await store.reap()).toBe(0);
    // Worker A stops heartbeating: its lease expires and the reaper orphans the attempt.
    await q(`update queue_item set lease_expires_at = now() - interval '1 second' where run_id = $1`, [runId]);
    expect(await store.reap()).toBe(1);
    expect((await q(`select status from step where run_id = $1`, [runId]))[0].status).toBe('retrying');
    const jobs = await q<{ key: string; run_at: Date }>(
      `select key, run_at from graphile_worker.jobs where task_identifier = 'ordo.engine.retry_step'`,
    );
    expect(jobs.map((j) => j.key)).toEqual([`retry:ta:${runId}:x:1`]);
    await store.requeue({ tenantId: 'ta', runId, stepId: 'x', attempt: 1 });
    const [b] = await store.cycle([], opts('worker-b'));
    expect(b).toMatchObject({ runId, stepId: 'x', attempt: 2, epoch: 2 });
    // A's late result carries epoch 1: rejected and recorded, not applied.
    await store.cycle([done(a, 'worker-a')], opts('worker-a', 0));
    expect((await q(`select status from step where run_id = $1`, [runId]))[0].status).toBe('running');
    await store.cycle([done(b, 'worker-b')], opts('worker-b', 0));
    const attempts = await q<{ attempt: number; status: string; worker_id: string }>(
      `select attempt, status, worker_id from attempt where run_id = $1 order by attempt`,
      [runId],
    );
    expect(attempts.map((x) => [x.attempt, x.status, x.worker_id])).toEqual([
      [1, 'orphaned', 'worker-a'],
      [2, 'succeeded', 'worker-b'],
    ]);
    const [step] = await q<{ status: string; outputs: unknown }>(`select status, outputs from step where run_id = $1`, [
      runId,
    ]);
    expect(step).toEqual({ status: 'succeeded', outputs: { by: 'worker-b' } });
    const types = (await q<{ type: string }>(`select type from run_event where run_id = $1 order by seq`, [runId])).map(
      (e) => e.type,
    );
    expect(types).toEqual([
      'run.created',
      'step.queued',
      'run.running',
      'step.running',
      'step.orphaned',
      'step.retrying',
      'step.queued',
      'step.running',
      'step.result_rejected',
      'step.succeeded',
      'run.succeeded',
    ]);
    expect((await q(`select count(*)::int as n from queue_item where run_id = $1`, [runId]))[0].n).toBe(0);
    expect(
      (await q(`select count(*)::int as in_flight from queue_item where tenant_id = 'ta' and state = 'leased'`))[0]
        .in_flight,
    ).toBe(0);
  });

  it('fails an orphaned step that has no retry left', async () => {
    const { runId } = await runs.createRun('ta', {
      dagId: 'single',
      inputs: {},
      runToken: 'orphan-fail',
      requestedBy: 'me',
    });
    await store.cycle([], opts('w'));
    await q(`update queue_item set lease_expires_at = now() - interval '1 second' where run_id = $1`, [runId]);
    expect(await store.reap()).toBe(1);
    const [r] = await q<{ status: string }>(`select status from run where run_id = $1`, [runId]);
    expect(r.status).toBe('failed');
    const [s] = await q<{ status: string; reason: string }>(`select status, reason from step where run_id = $1`, [
      runId,
    ]);
    expect(s).toEqual({ status: 'failed', reason: 'LEASE_EXPIRED' });
  });

  it('applies a batch of results and claims the ready successors in the same transaction', async () => {
    await publish('ta', {
      id: 'pair',
      steps: [
        { id: 'a', plugin: 'noop' },
        { id: 'b', plugin: 'noop', dependsOn: ['a'] },
      ],
    });
    const made = await runs.createRuns(
      'ta',
      Array.from({ length: 5 }, (_, i) => ({ dagId: 'pair', inputs: {}, runToken: `pair-${i}`, requestedBy: 'me' })),
    );
    expect(made.every((m) => m.created)).toBe(true);
    const first = await store.cycle([], opts('w', 5));
    expect(first.map((w) => w.stepId)).toEqual(['a', 'a', 'a', 'a', 'a']);
    const second = await store.cycle(
      first.map((w) => done(w, 'w')),
      opts('w', 5),
    );
    expect(second.map((w) => w.stepId)).toEqual(['b', 'b', 'b', 'b', 'b']);
    await store.cycle(
      second.map((w) => done(w, 'w')),
      opts('w', 0),
    );
    const st = await q<{ status: string }>(`select status from run where dag_id = 'pair'`);
    expect(st.every((r) => r.status === 'succeeded')).toBe(true);
  });

  it('serves a quiet tenant next to a tenant with a deep queue (round robin across tenants)', async () => {
    await publish('ta', { id: 'bulk', steps: [{ id: 'x', plugin: 'noop' }] });
    await runs.createRuns(
      'ta',
      Array.from({ length: 200 }, (_, i) => ({ dagId: 'bulk', inputs: {}, runToken: `bulk-${i}`, requestedBy: 'me' })),
    );
    const { runId } = await runs.createRun('tb', { dagId: 'one', inputs: {}, runToken: 'quiet', requestedBy: 'me' });
    const batch = await store.cycle([], opts('w', 4));
    expect(batch.filter((w) => w.tenantId === 'tb').map((w) => w.runId)).toEqual([runId]);
    expect(batch.filter((w) => w.tenantId === 'ta')).toHaveLength(3);
    await store.cycle(
      batch.map((w) => done(w, 'w')),
      opts('w', 0),
    );
  });

  it('caps the steps in flight per tenant', async () => {
    const batch = await store.cycle([], { workerId: 'w', capacity: 50, leaseMs: 60_000, tenantCap: 7 });
    expect(batch).toHaveLength(7);
    expect(
      (await q(`select count(*)::int as in_flight from queue_item where tenant_id = 'ta' and state = 'leased'`))[0]
        .in_flight,
    ).toBe(7);
    expect(await store.cycle([], { workerId: 'w', capacity: 50, leaseMs: 60_000, tenantCap: 7 })).toEqual([]);
    await store.cycle(
      batch.map((w) => done(w, 'w')),
      opts('w', 0),
    );
  });

  it('splits capacity by weight across tenants, and gives a share a tenant cannot use to the others', async () => {
    await runs.createRuns(
      'tb',
      Array.from({ length: 20 }, (_, i) => ({ dagId: 'one', inputs: {}, runToken: `w-${i}`, requestedBy: 'me' })),
    );
    await owner.query(`update tenant_queue set weight = 3 where tenant_id = 'tb'`);
    const batch = await store.cycle([], opts('w', 16));
    const count = (tenant: string) => batch.filter((w) => w.tenantId === tenant).length;
    expect([count('ta'), count('tb')]).toEqual([4, 12]);
    // 8 left for tb: its share of 12 is more than it has, the rest goes to ta in the next round.
    const next = await store.cycle(
      batch.map((w) => done(w, 'w')),
      opts('w', 16),
    );
    expect(next.filter((w) => w.tenantId === 'tb')).toHaveLength(8);
    expect(next.filter((w) => w.tenantId === 'ta')).toHaveLength(8);
    await owner.query(`update tenant_queue set weight = 1 where tenant_id = 'tb'`);
    await store.cycle(
      next.map((w) => done(w, 'w')),
      opts('w', 0),
    );
  });
});
