import pg from 'pg';
import { canonicalHash } from '../../src/core/json/canonical-json';
import { ArtifactsRepository } from '../../src/modules/artifacts/artifacts.repository';
import type { DagDefinitionInput } from '../../src/modules/dags/dag-definition';
import type { JsonObject } from '../../src/modules/plugins/plugin';
import { DagsRepository } from '../../src/modules/dags/dags.repository';
import { EngineRepository, type AdvanceRow } from '../../src/modules/engine/engine.repository';
import { EngineStore, type ClaimedWork, type Completion } from '../../src/modules/engine/engine.store';
import { verifyChain, type ChainedEvent } from '../../src/modules/runs/run-events';
import { RunsRepository } from '../../src/modules/runs/runs.repository';
import { RunsService } from '../../src/modules/runs/runs.service';
import { succeeded } from '../support/completions';
import { publishDagVersion } from '../support/publish-dag';
import { chainedEvent, RUN_EVENT_COLUMNS, type RunEventRow } from '../support/run-event-rows';
import { createTestDatabase, type TestDatabase } from '../support/test-database';

/** A fan-out of three branches and their join. */
const fan: DagDefinitionInput = {
  id: 'fan',
  steps: [
    { id: 'start', plugin: 'noop' },
    { id: 'b1', plugin: 'noop', dependsOn: ['start'] },
    { id: 'b2', plugin: 'noop', dependsOn: ['start'] },
    { id: 'b3', plugin: 'noop', dependsOn: ['start'] },
    { id: 'join', plugin: 'noop', dependsOn: ['b1', 'b2', 'b3'] },
  ],
};

/** The engine's statements with every hop, even of one result, applied by the batch function. */
/** Every result through ordo_engine_advance: a single success's chain is refused, as a chain that does not hold is. */
class BatchHops extends EngineRepository {
  override async chain(): Promise<AdvanceRow[]> {
    throw Object.assign(new Error('the batch function only'), { code: 'OR001' });
  }
}

/**
 * What results do (ordo_engine_advance, and ordo_engine_chain for a single success): rows, events
 * (chained in SQL, verified here by the code's verifier) and outcomes of every kind.
 */
/** A step another worker runs for `$1`, holding one of its in-flight slots (a leased queue item). */
const holdSlot = `insert into queue_item (tenant_id, run_id, step_id, state, worker_id, epoch, lease_expires_at)
  values ($1, gen_random_uuid(), 'elsewhere', 'leased', 'w2', 1, now() + interval '1 hour')`;
const releaseSlot = `delete from queue_item where tenant_id = $1 and step_id = 'elsewhere'`;

describe('engine: the one-statement hop', () => {
  let t: TestDatabase;
  let owner: pg.Client;
  let store: EngineStore;
  let runs: RunsService;
  const opts = (capacity: number, tenantCap = 64) => ({ workerId: 'w1', capacity, leaseMs: 60_000, tenantCap });
  const ok = (w: ClaimedWork, outputs: Record<string, unknown> = { n: w.stepId }): Completion =>
    succeeded(w, 'w1', outputs as JsonObject);

  const publish = (tenantId: string, input: DagDefinitionInput) => publishDagVersion(t.db, tenantId, input);

  async function events(tenantId: string, runId: string): Promise<ChainedEvent[]> {
    const r = await owner.query<RunEventRow>(
      `select ${RUN_EVENT_COLUMNS} from run_event where tenant_id = $1 and run_id = $2 order by seq`,
      [tenantId, runId],
    );
    return r.rows.map(chainedEvent);
  }

  const stepStates = async (runId: string) =>
    Object.fromEntries(
      (
        await owner.query<{ step_id: string; status: string }>(
          `select step_id, status from step where run_id = $1 order by step_id`,
          [runId],
        )
      ).rows.map((r) => [r.step_id, r.status]),
    );

  beforeAll(async () => {
    t = await createTestDatabase();
    owner = new pg.Client({ connectionString: t.ownerUrl });
    await owner.connect();
    await owner.query(`insert into tenant (id, name) values ('a', 'A'), ('b', 'B')`);
    store = new EngineStore(t.db, new EngineRepository(), new ArtifactsRepository());
    runs = new RunsService(t.db, new RunsRepository(), new DagsRepository());
    const chain = {
      id: 'chain',
      steps: [
        { id: 's1', plugin: 'noop' },
        { id: 's2', plugin: 'noop', dependsOn: ['s1'] },
        { id: 's3', plugin: 'noop', dependsOn: ['s2'] },
      ],
    };
    await publish('a', chain);
    await publish('b', chain);
    await publish('a', fan);
    await publish('a', {
      id: 'pair',
      steps: ['p1', 'p2', 'p3'].map((id) => ({ id, plugin: 'approval' })),
    });
    await publish('a', {
      id: 'gap',
      steps: [
        { id: 's1', plugin: 'noop' },
        { id: 's2', plugin: 'noop', dependsOn: ['s1'], disabled: true },
        { id: 's3', plugin: 'noop', dependsOn: ['s2'] },
      ],
    });
  });
  afterAll(async () => {
    await owner.end();
    await t.drop();
  });

  it('resolves several waiting steps of one run in one statement, their decisions chained one after another', async () => {
    const run = await runs.createRun('a', { dagId: 'pair', inputs: {}, runToken: 'pair-1', requestedBy: 'me' });
    const work = await store.cycle([], opts(4));
    expect(work.map((w) => w.stepId).sort()).toEqual(['p1', 'p2', 'p3']);
    const wait = (w: ClaimedWork): Completion => ({
      ...succeeded(w, 'w1'),
      outcome: { status: 'waiting', wait: { kind: 'approval' }, logs: [] },
    });
    expect(await store.advance(work.map(wait), opts(4))).toEqual([]);
    const ok = await store.withResolve((_tx, _one, resolveAll) =>
      resolveAll(
        work.map((w) => ({
          result: succeeded(w, 'w1', { decided: w.stepId }),
          decided: { type: 'step.decided', data: { by: w.stepId } },
        })),
      ),
    );
    expect(ok).toEqual([true, true, true]);
    expect(await stepStates(run.runId)).toEqual({ p1: 'succeeded', p2: 'succeeded', p3: 'succeeded' });
    const ev = await events('a', run.runId);
    expect(ev.filter((e) => e.type === 'step.decided').map((e) => e.stepId)).toEqual(['p1', 'p2', 'p3']);
    expect(verifyChain(ev)).toEqual({ ok: true });
    const r = (await owner.query(`select status, event_seq from run where run_id = $1`, [run.runId])).rows[0];
    expect(r).toEqual({ status: 'succeeded', event_seq: ev.length });
  });

  it('runs a chain hop by hop, each successor dispatched to the reporting worker, and ends the run with a verifying chain', async () => {
    const run = await runs.createRun('a', { dagId: 'chain', inputs: {}, runToken: 'c1', requestedBy: 'me' });
    let work = await store.cycle([], opts(4));
    expect(work.map((w) => w.stepId)).toEqual(['s1']);
    for (const next of ['s2', 's3']) {
      const got = await store.advance([ok(work[0])], opts(4));
      expect(got?.map((w) => [w.stepId, w.attempt, w.epoch, w.dispatchSeq])).toEqual([
        [next, 1, 1, Number(next.slice(1))],
      ]);
      expect(got[0].traceparent).toMatch(new RegExp(`^00-${got[0].traceId}-[0-9a-f]{16}-01$`));
      work = got!;
    }
    expect(await store.advance([ok(work[0])], opts(4))).toEqual([]);
    const r = (await owner.query(`select * from run where run_id = $1`, [run.runId])).rows[0];
    expect(r.status).toBe('succeeded');
    expect(r.steps_remaining).toBe(0);
    expect(r.dispatch_count).toBe(3);
    const steps = (
      await owner.query<{ step_id: string; outputs_hash: string }>(
        `select step_id, outputs_hash from step where run_id = $1 order by step_id`,
        [run.runId],
      )
    ).rows;
    // The run's outputs hash is the code's: SHA-256 of the canonical JSON of {stepId: outputsHash}.
    expect(r.outputs_hash).toBe(canonicalHash(Object.fromEntries(steps.map((s) => [s.step_id, s.outputs_hash]))));
    const ev = await events('a', run.runId);
    expect(verifyChain(ev)).toEqual({ ok: true });
    expect(ev.map((e) => [e.type, e.stepId])).toEqual([
      ['run.created', null],
      ['step.queued', 's1'],
      ['run.running', null],
      ['step.running', 's1'],
      ['step.succeeded', 's1'],
      ['step.queued', 's2'],
      ['step.running', 's2'],
      ['step.succeeded', 's2'],
      ['step.queued', 's3'],
      ['step.running', 's3'],
      ['step.succeeded', 's3'],
      ['run.succeeded', null],
    ]);
    expect(ev.find((e) => e.type === 'step.running' && e.stepId === 's2')?.data).toEqual({ dispatchSeq: 2, epoch: 1 });
    expect(ev.at(-1)?.data).toEqual({ outputsHash: r.outputs_hash });
    const attempts = (
      await owner.query(
        `select step_id, status, worker_id, claimed_at, terminated_at from attempt where run_id = $1 order by step_id`,
        [run.runId],
      )
    ).rows;
    expect(attempts.map((a) => [a.step_id, a.status, a.worker_id])).toEqual([
      ['s1', 'succeeded', 'w1'],
      ['s2', 'succeeded', 'w1'],
      ['s3', 'succeeded', 'w1'],
    ]);
    expect(attempts.every((a) => a.terminated_at !== null)).toBe(true);
    expect((await owner.query(`select count(*)::int n from queue_item where run_id = $1`, [run.runId])).rows[0].n).toBe(
      0,
    );
    expect(
      (
        await owner.query(
          `select count(*)::int as in_flight from queue_item where tenant_id = 'a' and state = 'leased'`,
        )
      ).rows[0].in_flight,
    ).toBe(0);
  });

  it('dispatches a fan-out up to its room and queues the rest; the join follows the last branch', async () => {
    const run = await runs.createRun('a', { dagId: 'fan', inputs: {}, runToken: 'f1', requestedBy: 'me' });
    const [start] = await store.cycle([], opts(1));
    const got = await store.advance([ok(start)], opts(2));
    expect(got?.map((w) => w.stepId)).toEqual(['b1', 'b2']);
    expect(await stepStates(run.runId)).toEqual({
      b1: 'running',
      b2: 'running',
      b3: 'queued',
      join: 'pending',
      start: 'succeeded',
    });
    const queued = (
      await owner.query(`select step_id, state from queue_item where run_id = $1 order by step_id`, [run.runId])
    ).rows;
    expect(queued).toEqual([
      { step_id: 'b1', state: 'leased' },
      { step_id: 'b2', state: 'leased' },
      { step_id: 'b3', state: 'ready' },
    ]);
    // Two results in one hop; the third branch comes from the queue.
    expect(
      await store.advance(
        got.map((w) => ok(w)),
        opts(4),
      ),
    ).toEqual([]);
    const [b3] = await store.cycle([], opts(4));
    expect(b3.stepId).toBe('b3');
    const joined = await store.advance([ok(b3)], opts(4));
    expect(joined?.map((w) => w.stepId)).toEqual(['join']);
    expect(await store.advance([ok(joined[0])], opts(4))).toEqual([]);
    expect((await owner.query(`select status from run where run_id = $1`, [run.runId])).rows[0].status).toBe(
      'succeeded',
    );
    expect(verifyChain(await events('a', run.runId))).toEqual({ ok: true });
    const seqs = (
      await owner.query(`select step_id, dispatch_seq from step where run_id = $1 order by dispatch_seq`, [run.runId])
    ).rows;
    expect(seqs.map((s) => s.step_id)).toEqual(['start', 'b1', 'b2', 'b3', 'join']);
  });

  it('keeps to the tenant in-flight cap: a successor over the cap is queued, not dispatched', async () => {
    const run = await runs.createRun('b', { dagId: 'chain', inputs: {}, runToken: 'cap', requestedBy: 'me' });
    const [s1] = await store.cycle([], opts(4));
    // Another worker holds the tenant's one slot once s1's slot is released.
    await owner.query(holdSlot, ['b']);
    expect(await store.advance([ok(s1)], opts(4, 1))).toEqual([]);
    expect(await stepStates(run.runId)).toEqual({ s1: 'succeeded', s2: 'queued', s3: 'pending' });
    await owner.query(releaseSlot, ['b']);
    const [s2] = await store.cycle([], opts(4));
    expect(s2.stepId).toBe('s2');
  });

  it('applies in its one statement a fenced-out result (recorded, never applied), a failure (dependents skipped, the run failed) and a disabled successor (skipped, its dependent dispatched)', async () => {
    const run = await runs.createRun('a', { dagId: 'chain', inputs: {}, runToken: 'stale', requestedBy: 'me' });
    const [s1] = await store.cycle([], opts(4));
    expect(await store.advance([{ ...ok(s1), epoch: s1.epoch + 1 }], opts(4))).toEqual([]);
    expect(await stepStates(run.runId)).toEqual({ s1: 'running', s2: 'pending', s3: 'pending' });
    const rejected = (await events('a', run.runId)).at(-1)!;
    expect(rejected).toMatchObject({
      type: 'step.result_rejected',
      stepId: 's1',
      data: { epoch: s1.epoch + 1, currentEpoch: s1.epoch, stepStatus: 'running', reported: 'succeeded' },
    });
    expect(
      await store.advance(
        [{ ...ok(s1), outcome: { status: 'failed', error: { code: 'X', message: 'x', retryable: false }, logs: [] } }],
        opts(4),
      ),
    ).toEqual([]);
    expect(await stepStates(run.runId)).toEqual({ s1: 'failed', s2: 'skipped', s3: 'skipped' });
    const evs = await events('a', run.runId);
    expect(evs.slice(-4).map((e) => [e.type, e.stepId])).toEqual([
      ['step.failed', 's1'],
      ['step.skipped', 's2'],
      ['step.skipped', 's3'],
      ['run.failed', null],
    ]);
    expect(evs.at(-4)!.data).toEqual({ error: { code: 'X', message: 'x', retryable: false } });
    expect(verifyChain(evs)).toEqual({ ok: true });
    const ended = (
      await owner.query(`select status, steps_remaining, steps_failed from run where run_id = $1`, [run.runId])
    ).rows[0];
    expect(ended).toEqual({ status: 'failed', steps_remaining: 0, steps_failed: 1 });

    const gap = await runs.createRun('a', { dagId: 'gap', inputs: {}, runToken: 'gap', requestedBy: 'me' });
    const [g1] = await store.cycle([], opts(4));
    expect(g1.runId).toBe(gap.runId);
    const next = await store.advance([ok(g1)], opts(4));
    expect(next.map((w) => w.stepId)).toEqual(['s3']);
    expect(await stepStates(gap.runId)).toEqual({ s1: 'succeeded', s2: 'skipped', s3: 'running' });
    expect(verifyChain(await events('a', gap.runId))).toEqual({ ok: true });
  });

  it('writes the same rows and events for a result alone (ordo_engine_chain with no link) as the batch function does', async () => {
    await owner.query(`insert into tenant (id, name) values ('h1', 'hop'), ('h2', 'batch')`);
    const chain = {
      id: 'chain',
      steps: [
        { id: 's1', plugin: 'noop' },
        { id: 's2', plugin: 'noop', dependsOn: ['s1'] },
      ],
    };
    for (const tenant of ['h1', 'h2']) {
      await publish(tenant, fan);
      await publish(tenant, chain);
    }
    const batchStore = new EngineStore(t.db, new BatchHops(), new ArtifactsRepository());

    /** A fan-out with room for two, its branches reported one by one, the join; then a chain over the tenant's cap. */
    async function play(s: EngineStore, tenant: string): Promise<string[]> {
      const one = async (w: ClaimedWork, capacity: number, cap = 64) => await s.advance([ok(w)], opts(capacity, cap));
      const f = await runs.createRun(tenant, { dagId: 'fan', inputs: {}, runToken: 'eq', requestedBy: 'me' });
      const [start] = await s.cycle([], opts(1));
      const [b1, b2] = await one(start, 2);
      expect(await stepStates(f.runId)).toMatchObject({ b1: 'running', b2: 'running', b3: 'queued' });
      expect(await one(b2, 4)).toEqual([]);
      expect(await one(b1, 4)).toEqual([]);
      const [b3] = await s.cycle([], opts(4));
      const [join] = await one(b3, 4);
      expect(join.stepId).toBe('join');
      expect(await one(join, 4)).toEqual([]);
      const c = await runs.createRun(tenant, { dagId: 'chain', inputs: {}, runToken: 'eq', requestedBy: 'me' });
      const [s1] = await s.cycle([], opts(4));
      await owner.query(holdSlot, [tenant]);
      expect(await one(s1, 4, 1)).toEqual([]);
      await owner.query(releaseSlot, [tenant]);
      expect((await owner.query(`select step_id, state from queue_item where run_id = $1`, [c.runId])).rows).toEqual([
        { step_id: 's2', state: 'ready' },
      ]);
      const [s2] = await s.cycle([], opts(4));
      expect([s2.runId, s2.stepId]).toEqual([c.runId, 's2']);
      expect(await one(s2, 4)).toEqual([]);
      return [f.runId, c.runId];
    }

    async function written(tenant: string, runIds: string[]) {
      const q = async (text: string) => (await owner.query(text, [tenant, runIds])).rows;
      const byRun = (rows: Record<string, unknown>[]): Record<string, unknown>[] =>
        rows.map(({ run_id, ...rest }) => ({ run: runIds.indexOf(run_id as string), ...rest }));
      return {
        runs: byRun(
          await q(`select run_id, status, steps_remaining, dispatch_count, event_seq, started_at is not null as started,
            finished_at is not null as finished, outputs_hash is not null as has_outputs from run
            where tenant_id = $1 and run_id = any($2) order by array_position($2, run_id)`),
        ),
        steps: byRun(
          await q(`select run_id, step_id, status, epoch, attempts, dispatch_seq, pending_deps, outputs, outputs_hash,
            logs_hash, queued_at is not null as queued, started_at is not null as started, finished_at is not null as finished
            from step where tenant_id = $1 and run_id = any($2) order by array_position($2, run_id), step_id`),
        ),
        attempts: byRun(
          await q(`select run_id, step_id, attempt, epoch, worker_id, status, outputs_hash, logs_hash,
            queued_at is not null as queued, started_at is not null as started, finished_at is not null as finished,
            terminated_at is not null as terminated, lease_expires_at > now() as leased
            from attempt where tenant_id = $1 and run_id = any($2) order by array_position($2, run_id), step_id, attempt`),
        ),
        queue: byRun(
          await q(`select run_id, step_id, state, worker_id, epoch from queue_item
            where tenant_id = $1 and run_id = any($2) order by array_position($2, run_id), step_id`),
        ),
        events: byRun(
          await q(`select run_id, seq, type, step_id, attempt, actor, data - 'outputsHash' - 'traceId' as data,
            data ? 'outputsHash' as hashed, data ? 'traceId' as traced
            from run_event where tenant_id = $1 and run_id = any($2) order by array_position($2, run_id), seq`),
        ),
        inFlight: (
          await owner.query(
            `select count(*)::int as in_flight from queue_item where tenant_id = $1 and state = 'leased'`,
            [tenant],
          )
        ).rows[0].in_flight as number,
        artifacts: (await owner.query(`select count(*)::int as n from artifact where tenant_id = $1`, [tenant])).rows[0]
          .n as number,
      };
    }

    const hop = await written('h1', await play(store, 'h1'));
    const batch = await written('h2', await play(batchStore, 'h2'));
    expect(hop).toEqual(batch);
    expect(hop.runs.map((r) => r.status)).toEqual(['succeeded', 'succeeded']);
    expect(hop.queue).toEqual([]);
    expect(hop.events.filter((e) => e.type === 'step.running')).toHaveLength(7);
    for (const tenant of ['h1', 'h2'])
      for (const { run_id } of (await owner.query(`select run_id from run where tenant_id = $1`, [tenant])).rows)
        expect(verifyChain(await events(tenant, run_id as string))).toEqual({ ok: true });
  });

  it('sends its notifications after the commit, from a transaction of their own, not from the hop', async () => {
    const heard: string[] = [];
    const listener = new pg.Client({ connectionString: t.ownerUrl });
    await listener.connect();
    listener.on('notification', (n) => heard.push(`${n.channel} ${n.payload}`));
    await listener.query('listen ordo_run_event; listen ordo_run_finished; listen ordo_ready');
    const settle = () => new Promise((r) => setTimeout(r, 150));
    try {
      const run = await runs.createRun('b', { dagId: 'chain', inputs: {}, runToken: 'notify', requestedBy: 'me' });
      let [w] = await store.cycle([], opts(4));
      expect(w.runId).toBe(run.runId);
      // The hop's statement, committed on its own, with what it collected left unsent.
      const repo = new EngineRepository();
      const hop = async (work: ClaimedWork) =>
        repo.advance(t.db.system, {
          worker: 'w1',
          leaseMs: 60_000,
          capacity: 4,
          cap: 64,
          results: [
            {
              tenant_id: 'b',
              run_id: work.runId,
              step_id: work.stepId,
              attempt: work.attempt,
              epoch: work.epoch,
              status: 'succeeded',
              outputs: {},
              outputs_hash: 'f'.repeat(64),
              logs_hash: null,
              error: null,
              started_at: null,
              finished_at: null,
              ord: 1,
            },
          ],
          artifacts: [],
        });
      await settle();
      heard.length = 0;
      const rows = await hop(w);
      const notes = rows.flatMap((r) => (r.kind === 'notify' ? [r.item] : []));
      expect(notes.map(([channel, payload]) => [channel, payload.split(' ')[0]])).toEqual([['ordo_run_event', 'b']]);
      await settle();
      expect(heard).toEqual([]);
      await repo.notify(t.db.system, notes);
      await settle();
      expect(heard).toEqual(notes.map(([c, p]) => `${c} ${p}`));

      // Through the store: the run's end is announced once its hop has committed.
      heard.length = 0;
      [w] = rows
        .flatMap((r) => (r.kind === 'dispatch' ? [r.item] : []))
        .map((d) => ({ ...w, stepId: d.step_id, attempt: d.attempts, epoch: d.epoch }));
      expect(w.stepId).toBe('s2');
      const [s3] = await store.advance([ok(w)], opts(4));
      expect(await store.advance([ok(s3)], opts(4))).toEqual([]);
      for (let i = 0; i < 40 && !heard.includes(`ordo_run_finished ${run.runId}`); i++) await settle();
      expect(heard).toContain(`ordo_run_finished ${run.runId}`);
      // The live stream heard of both hops (the first hop's notification waits a little for others
      // to go with it, so the two usually arrive as one): the last names the run's newest event.
      const newest = (
        await owner.query<{ id: string }>(`select max(stream_id)::text id from run_event where tenant_id = 'b'`)
      ).rows[0].id;
      const stream = heard.filter((h) => h.startsWith('ordo_run_event b '));
      expect(stream.length).toBeGreaterThanOrEqual(1);
      expect(stream.length).toBeLessThanOrEqual(2);
      expect(stream.at(-1)).toBe(`ordo_run_event b ${newest}`);

      // Writers outside the engine's statements notify in their own transaction, as before.
      heard.length = 0;
      await owner.query(
        `insert into run_event (tenant_id, run_id, seq, created_at, type, actor, data, prev_hash, hash)
        values ('b', $1, 999, now(), 'x', 'me', '{}', '', repeat('c', 64))`,
        [run.runId],
      );
      await settle();
      expect(heard.map((h) => h.split(' ').slice(0, 2).join(' '))).toEqual(['ordo_run_event b']);
    } finally {
      await listener.end();
    }
  });

  it('mixes with the general transaction in one chain: events written by either verify together', async () => {
    const run = await runs.createRun('b', { dagId: 'chain', inputs: {}, runToken: 'mix', requestedBy: 'me' });
    const [s1] = await store.cycle([], opts(4));
    const [s2] = await store.advance([ok(s1, { text: 'ünïcödé "quoted" \\ \n' })], opts(4));
    const [s3] = await store.cycle([ok(s2)], opts(4));
    expect(await store.advance([ok(s3)], opts(4))).toEqual([]);
    const ev = await events('b', run.runId);
    expect(verifyChain(ev)).toEqual({ ok: true });
    expect(ev.at(-1)?.type).toBe('run.succeeded');
  });
});
