import pg from 'pg';
import { ArtifactsRepository } from '../../src/modules/artifacts/artifacts.repository';
import type { DagDefinitionInput } from '../../src/modules/dags/dag-definition';
import { DagsRepository } from '../../src/modules/dags/dags.repository';
import { EngineRepository } from '../../src/modules/engine/engine.repository';
import { EngineStore, type ChainLink, type ClaimedWork, type Completion } from '../../src/modules/engine/engine.store';
import type { JsonObject } from '../../src/modules/plugins/plugin';
import { verifyChain, type ChainedEvent } from '../../src/modules/runs/run-events';
import { RunsRepository } from '../../src/modules/runs/runs.repository';
import { RunsService } from '../../src/modules/runs/runs.service';
import { succeeded } from '../support/completions';
import { publishDagVersion } from '../support/publish-dag';
import { chainedEvent, RUN_EVENT_COLUMNS, type RunEventRow } from '../support/run-event-rows';
import { createTestDatabase, type TestDatabase } from '../support/test-database';

/** A chain whose third step fans out to two, and their join. */
const line: DagDefinitionInput = {
  id: 'line',
  steps: [
    { id: 's1', plugin: 'noop' },
    { id: 's2', plugin: 'noop', dependsOn: ['s1'], with: { output: { k: 2 } } },
    { id: 's3', plugin: 'noop', dependsOn: ['s2'] },
    { id: 't1', plugin: 'noop', dependsOn: ['s3'] },
    { id: 't2', plugin: 'noop', dependsOn: ['s3'] },
    { id: 'z', plugin: 'noop', dependsOn: ['t1', 't2'] },
  ],
};

/**
 * A chain of results in one commit (ordo_engine_chain) against one hop per result: the same
 * rows, events and hashes; and a chain that does not hold in the run is refused, writing nothing.
 */
describe('engine: a chain of steps in one commit', () => {
  let t: TestDatabase;
  let owner: pg.Client;
  let store: EngineStore;
  let runs: RunsService;
  const opts = (capacity: number) => ({ workerId: 'w1', capacity, leaseMs: 60_000, tenantCap: 64 });
  const ok = (w: Pick<ClaimedWork, 'tenantId' | 'runId' | 'stepId' | 'attempt' | 'epoch'>): Completion =>
    succeeded(w, 'w1', { n: w.stepId });
  /** The link a worker reports for `stepId` of `head`'s run, run with the step's plugin and config. */
  const link = (head: ClaimedWork, stepId: string, config: JsonObject = {}, plugin = 'noop'): ChainLink => ({
    completion: ok({ ...head, stepId, attempt: 1, epoch: 0 }),
    plugin,
    config,
    traceparent: `00-${head.traceId}-${'ab'.repeat(8)}-01`,
  });

  async function events(tenantId: string, runId: string): Promise<ChainedEvent[]> {
    const r = await owner.query<RunEventRow>(
      `select ${RUN_EVENT_COLUMNS} from run_event where tenant_id = $1 and run_id = $2 order by seq`,
      [tenantId, runId],
    );
    return r.rows.map(chainedEvent);
  }

  async function written(tenant: string, runId: string) {
    const q = async (text: string) => (await owner.query(text, [tenant, runId])).rows;
    return {
      run: await q(`select status, steps_remaining, dispatch_count, event_seq, outputs_hash is not null as has_outputs
        from run where tenant_id = $1 and run_id = $2`),
      steps:
        await q(`select step_id, status, epoch, attempts, dispatch_seq, pending_deps, outputs, outputs_hash, logs_hash,
        queued_at is not null as queued, started_at is not null as started, finished_at is not null as finished
        from step where tenant_id = $1 and run_id = $2 order by step_id`),
      attempts: await q(`select step_id, attempt, epoch, worker_id, status, outputs_hash, logs_hash,
        queued_at is not null as queued, claimed_at is not null as claimed, constraint_checked_at is not null as checked,
        started_at is not null as started, finished_at is not null as finished, terminated_at is not null as terminated
        from attempt where tenant_id = $1 and run_id = $2 order by step_id, attempt`),
      queue: await q(
        `select step_id, state, worker_id, epoch from queue_item where tenant_id = $1 and run_id = $2 order by step_id`,
      ),
      events:
        await q(`select seq, type, step_id, attempt, actor, data - 'traceId' as data, data ? 'traceId' as traced from run_event
        where tenant_id = $1 and run_id = $2 order by seq`),
      inFlight: (
        await owner.query(
          `select count(*)::int as in_flight from queue_item where tenant_id = $1 and state = 'leased'`,
          [tenant],
        )
      ).rows[0].in_flight as number,
    };
  }

  const nothingWritten = async (tenant: string, runId: string, fn: () => Promise<unknown>) => {
    const before = await written(tenant, runId);
    await fn();
    expect(await written(tenant, runId)).toEqual(before);
  };

  beforeAll(async () => {
    t = await createTestDatabase();
    owner = new pg.Client({ connectionString: t.ownerUrl });
    await owner.connect();
    await owner.query(`insert into tenant (id, name) values ('hop', 'hop'), ('chain', 'chain'), ('x', 'x')`);
    store = new EngineStore(t.db, new EngineRepository(), new ArtifactsRepository());
    runs = new RunsService(t.db, new RunsRepository(), new DagsRepository());
    for (const tenant of ['hop', 'chain', 'x']) await publishDagVersion(t.db, tenant, line);
    await publishDagVersion(t.db, 'x', {
      id: 'three',
      steps: [
        { id: 'a', plugin: 'noop' },
        { id: 'b', plugin: 'noop', dependsOn: ['a'] },
        { id: 'c', plugin: 'noop', dependsOn: ['b'] },
      ],
    });
    await publishDagVersion(t.db, 'x', {
      id: 'fan',
      steps: [
        { id: 'a', plugin: 'noop' },
        { id: 'b', plugin: 'noop', dependsOn: ['a'] },
        { id: 'c', plugin: 'noop', dependsOn: ['a'] },
      ],
    });
  });
  afterAll(async () => {
    await owner.end();
    await t.drop();
  });

  it('writes what one hop per result writes: rows, attempts, dispatch order, events and hashes', async () => {
    // One hop per result.
    const h = await runs.createRun('hop', { dagId: 'line', inputs: {}, runToken: 'eq', requestedBy: 'me' });
    const [h1] = await store.cycle([], opts(4));
    const [h2] = await store.advance([ok(h1)], opts(1));
    const [h3] = await store.advance([ok(h2)], opts(1));
    const hopFan = await store.advance([ok(h3)], opts(2));
    expect(hopFan.map((w) => [w.stepId, w.dispatchSeq])).toEqual([
      ['t1', 4],
      ['t2', 5],
    ]);
    // The same run as a chain: s1's result with s2 and s3 run after it, in one statement.
    const c = await runs.createRun('chain', { dagId: 'line', inputs: {}, runToken: 'eq', requestedBy: 'me' });
    const [c1] = await store.cycle([], opts(4));
    const chainFan = (await store.chain(ok(c1), [link(c1, 's2', { output: { k: 2 } }), link(c1, 's3')], opts(2)))!;
    expect(chainFan.map((w) => [w.stepId, w.attempt, w.epoch, w.dispatchSeq])).toEqual([
      ['t1', 1, 1, 4],
      ['t2', 1, 1, 5],
    ]);
    expect(await written('chain', c.runId)).toEqual(await written('hop', h.runId));
    const traceparent = (
      await owner.query(`select traceparent from attempt where run_id = $1 and step_id = 's2'`, [c.runId])
    ).rows[0].traceparent;
    expect(traceparent).toBe(`00-${c1.traceId}-${'ab'.repeat(8)}-01`);

    // Both runs finish the same way, and every event verifies.
    for (const [tenant, fan] of [
      ['hop', hopFan],
      ['chain', chainFan],
    ] as const) {
      expect(await store.advance([ok(fan[1])], opts(4))).toEqual([]);
      const [z] = await store.advance([ok(fan[0])], opts(4));
      expect(await store.advance([ok(z)], opts(4))).toEqual([]);
      void tenant;
    }
    const hop = await written('hop', h.runId);
    expect(await written('chain', c.runId)).toEqual(hop);
    expect(hop.run[0]).toMatchObject({ status: 'succeeded', steps_remaining: 0, dispatch_count: 6 });
    expect(hop.inFlight).toBe(0);
    const ev = await events('chain', c.runId);
    expect(verifyChain(ev)).toEqual({ ok: true });
    expect(ev.slice(3, 13).map((e) => [e.type, e.stepId])).toEqual([
      ['step.running', 's1'],
      ['step.succeeded', 's1'],
      ['step.queued', 's2'],
      ['step.running', 's2'],
      ['step.succeeded', 's2'],
      ['step.queued', 's3'],
      ['step.running', 's3'],
      ['step.succeeded', 's3'],
      ['step.queued', 't1'],
      ['step.queued', 't2'],
    ]);
  });

  it('ends the run when the chain reaches its last step', async () => {
    const r = await runs.createRun('x', { dagId: 'line', inputs: {}, runToken: 'end', requestedBy: 'me' });
    const [s1] = await store.cycle([], opts(4));
    const fan = (await store.chain(ok(s1), [link(s1, 's2', { output: { k: 2 } }), link(s1, 's3')], opts(1)))!;
    // Room for one: t2 waits in the queue.
    expect(fan.map((w) => w.stepId)).toEqual(['t1']);
    expect(
      (await owner.query(`select step_id, state from queue_item where run_id = $1 order by step_id`, [r.runId])).rows,
    ).toEqual([
      { step_id: 't1', state: 'leased' },
      { step_id: 't2', state: 'ready' },
    ]);
    const [t2] = await store.cycle([], opts(4));
    expect(t2.stepId).toBe('t2');
    expect(await store.advance([ok(t2)], opts(4))).toEqual([]);
    const [z] = await store.advance([ok(fan[0])], opts(4));
    // z has two dependencies, so it cannot be chained after t1: it is dispatched, then finished by a hop.
    expect(await store.chain(ok(fan[0]), [link(fan[0], 'z')], opts(4))).toBeNull();
    expect(await store.advance([ok(z)], opts(4))).toEqual([]);
    expect((await owner.query(`select status from run where run_id = $1`, [r.runId])).rows[0].status).toBe('succeeded');
    expect(verifyChain(await events('x', r.runId))).toEqual({ ok: true });

    // A chain that runs to the end of a run ends it in the same statement.
    const w = await runs.createRun('x', { dagId: 'three', inputs: {}, runToken: 'end', requestedBy: 'me' });
    const [a] = await store.cycle([], opts(4));
    expect(await store.chain(ok(a), [link(a, 'b'), link(a, 'c')], opts(4))).toEqual([]);
    const run = (await owner.query(`select * from run where run_id = $1`, [w.runId])).rows[0];
    expect(run).toMatchObject({ status: 'succeeded', steps_remaining: 0, dispatch_count: 3 });
    expect(run.finished_at).not.toBeNull();
    const ev = await events('x', w.runId);
    expect(verifyChain(ev)).toEqual({ ok: true });
    expect(ev.at(-1)).toMatchObject({ type: 'run.succeeded', data: { outputsHash: run.outputs_hash } });
    expect((await owner.query(`select count(*)::int n from queue_item where run_id = $1`, [w.runId])).rows[0].n).toBe(
      0,
    );
    expect(
      (
        await owner.query(
          `select count(*)::int as in_flight from queue_item where tenant_id = 'x' and state = 'leased'`,
        )
      ).rows[0].in_flight,
    ).toBe(0);
  });

  it('dispatches the step still running after the chain to the worker, under the traceparent it runs with', async () => {
    const r = await runs.createRun('x', { dagId: 'three', inputs: {}, runToken: 'ahead', requestedBy: 'me' });
    const [a] = await store.cycle([], opts(4));
    const tp = `00-${a.traceId}-${'cd'.repeat(8)}-01`;
    // No link: the hop for a's result, with b ahead.
    const [b] = (await store.chain(ok(a), [], opts(1), { stepId: 'b', traceparent: tp }))!;
    expect([b.stepId, b.attempt, b.epoch, b.dispatchSeq, b.traceparent]).toEqual(['b', 1, 1, 2, tp]);
    expect(
      (await owner.query(`select traceparent from attempt where run_id = $1 and step_id = 'b'`, [r.runId])).rows[0]
        .traceparent,
    ).toBe(tp);
    expect(await store.advance([ok(b)], opts(1))).toHaveLength(1);

    // A link, then the step ahead of it.
    const l = await runs.createRun('x', { dagId: 'line', inputs: {}, runToken: 'ahead', requestedBy: 'me' });
    const [s1] = await store.cycle([], opts(4));
    const tp3 = `00-${s1.traceId}-${'ef'.repeat(8)}-01`;
    const [s3] = (await store.chain(ok(s1), [link(s1, 's2', { output: { k: 2 } })], opts(1), {
      stepId: 's3',
      traceparent: tp3,
    }))!;
    expect([s3.stepId, s3.attempt, s3.epoch, s3.dispatchSeq, s3.traceparent]).toEqual(['s3', 1, 1, 3, tp3]);
    expect(await written('x', l.runId)).toMatchObject({ queue: [{ step_id: 's3', state: 'leased', worker_id: 'w1' }] });
    expect(verifyChain(await events('x', l.runId))).toEqual({ ok: true });
  });

  it('refuses, writing nothing, a chain that does not hold in the run; the first result alone then applies', async () => {
    const r = await runs.createRun('x', { dagId: 'line', inputs: {}, runToken: 'refuse', requestedBy: 'me' });
    const [s1] = await store.cycle([], opts(4));
    const s2 = (c: JsonObject = { output: { k: 2 } }) => link(s1, 's2', c);
    await nothingWritten('x', r.runId, async () => {
      // A link that skips a step, a config or plugin other than the step's, a link that is not a step.
      expect(await store.chain(ok(s1), [link(s1, 's3')], opts(4))).toBeNull();
      expect(await store.chain(ok(s1), [s2({ output: { k: 3 } })], opts(4))).toBeNull();
      expect(await store.chain(ok(s1), [{ ...s2(), plugin: 'script' }], opts(4))).toBeNull();
      expect(await store.chain(ok(s1), [s2(), link(s1, 'nope')], opts(4))).toBeNull();
      // The same link twice, a fenced-out first result.
      expect(await store.chain(ok(s1), [s2(), s2()], opts(4))).toBeNull();
      expect(await store.chain({ ...ok(s1), epoch: s1.epoch + 1 }, [s2()], opts(4))).toBeNull();
      // Past a step with two dependents (s3 → t1, t2): t1 is not the next step of a chain.
      expect(await store.chain(ok(s1), [s2(), link(s1, 's3'), link(s1, 't1')], opts(4))).toBeNull();
    });
    const [n2] = await store.advance([ok(s1)], opts(4));
    expect(n2.stepId).toBe('s2');

    // A step with two dependents cannot head a chain either.
    const f = await runs.createRun('x', { dagId: 'fan', inputs: {}, runToken: 'refuse', requestedBy: 'me' });
    const [a] = await store.cycle([], opts(4));
    await nothingWritten('x', f.runId, async () => {
      expect(await store.chain(ok(a), [link(a, 'b')], opts(4))).toBeNull();
    });

    // A cancelled run takes no chain.
    const k = await runs.createRun('x', { dagId: 'line', inputs: {}, runToken: 'cancel', requestedBy: 'me' });
    const [k1] = await store.cycle([], opts(4));
    await runs.cancel('x', k.runId, 'me');
    await nothingWritten('x', k.runId, async () => {
      expect(await store.chain(ok(k1), [link(k1, 's2', { output: { k: 2 } })], opts(4))).toBeNull();
    });
    expect(verifyChain(await events('x', k.runId))).toEqual({ ok: true });
  });
});
