import pg from 'pg';
import { DagsRepository } from '../../src/modules/dags/dags.repository';
import { RunsRepository } from '../../src/modules/runs/runs.repository';
import { RunsService } from '../../src/modules/runs/runs.service';
import { publishDagVersion } from '../support/publish-dag';
import { createTestDatabase, type TestDatabase } from '../support/test-database';

type Dispatch = { tenant_id: string; run_id: string; step_id: string; dispatch_seq: number };

/**
 * Priorities in the claim (db/functions/ordo_engine_claim.sql) and scheduled runs' start
 * (db/functions/ordo_start_scheduled.sql), against the real functions.
 */
describe('engine: priorities and scheduled runs', () => {
  let t: TestDatabase;
  let owner: pg.Client;
  let runs: RunsService;
  const claim = async (capacity: number, only?: string[]): Promise<Dispatch[]> => {
    const r = await owner.query<{ kind: string; item: Dispatch }>(
      'select kind, item from ordo_engine_claim($1::jsonb)',
      [JSON.stringify({ worker: 'w', leaseMs: 60_000, capacity, cap: 64, ...(only ? { only } : {}) })],
    );
    return r.rows.filter((x) => x.kind === 'dispatch').map((x) => x.item);
  };
  const tenants = async (...ids: string[]) => {
    await owner.query(`insert into tenant (id, name) select x, x from unnest($1::text[]) x on conflict do nothing`, [
      ids,
    ]);
    for (const id of ids) {
      await publishDagVersion(t.db, id, {
        id: 'fan',
        steps: [
          { id: 'a', plugin: 'noop' },
          { id: 'b', plugin: 'noop', priority: 7 },
          { id: 'c', plugin: 'noop' },
          { id: 'd', plugin: 'noop', dependsOn: ['a'] },
        ],
      });
    }
  };
  const events = async (tenantId: string, runId: string) =>
    (
      await owner.query<{ type: string; step_id: string | null; data: unknown }>(
        'select type, step_id, data from run_event where tenant_id = $1 and run_id = $2 order by seq',
        [tenantId, runId],
      )
    ).rows;

  beforeAll(async () => {
    t = await createTestDatabase();
    owner = new pg.Client({ connectionString: t.ownerUrl });
    await owner.connect();
    runs = new RunsService(t.db, new RunsRepository(), new DagsRepository());
  });
  afterAll(async () => {
    await owner.end();
    await t.drop();
  });

  it("dispatches a tenant's ready steps highest priority first, then in queue order; the same every time (20 runs)", async () => {
    // Runs r0..r4 with priorities -, 2, 9, 9, -; step b names 7 (its own priority holds over its run's).
    const priorities = [undefined, 2, 9, 9, undefined];
    const orders: string[][] = [];
    for (let i = 0; i < 20; i++) {
      const tenant = `prio${i}`;
      await tenants(tenant);
      const created = await runs.createRuns(
        tenant,
        priorities.map((priority, k) => ({ dagId: 'fan', inputs: {}, runToken: `r${k}`, requestedBy: 'me', priority })),
      );
      const name = new Map(created.map((c, k) => [c.runId, `r${k}`]));
      // Every other time one claim takes them all, else one claim per step: the order is the same.
      const got: Dispatch[] = [];
      if (i % 2 === 0) got.push(...(await claim(16, [tenant])));
      else for (let n = 0; n < 15; n++) got.push(...(await claim(1, [tenant])));
      orders.push(got.map((d) => `${name.get(d.run_id)}.${d.step_id}#${d.dispatch_seq}`));
    }
    expect(orders[0]).toEqual([
      'r2.a#1',
      'r2.c#2',
      'r3.a#1',
      'r3.c#2',
      'r0.b#1',
      'r1.b#1',
      'r2.b#3',
      'r3.b#3',
      'r4.b#1',
      'r0.a#2',
      'r0.c#3',
      'r4.a#2',
      'r4.c#3',
      'r1.a#2',
      'r1.c#3',
    ]);
    for (const o of orders) expect(o).toEqual(orders[0]);
  });

  it('records a run priority in run.created only when given, and keeps the queue order of runs without one', async () => {
    await tenants('plain');
    const created = await runs.createRuns(
      'plain',
      [0, 1].map((k) => ({ dagId: 'fan', inputs: {}, runToken: `p${k}`, requestedBy: 'me' })),
    );
    const [first] = await events('plain', created[0].runId);
    expect(first.type).toBe('run.created');
    expect(Object.keys(first.data as object)).not.toContain('priority');
    const got = await claim(16, ['plain']);
    // b (priority 7) first, then the run's other steps in queue order (run age, topological, step id).
    expect(got.map((d) => `${d.run_id === created[0].runId ? 'p0' : 'p1'}.${d.step_id}`)).toEqual([
      'p0.b',
      'p1.b',
      'p0.a',
      'p0.c',
      'p1.a',
      'p1.c',
    ]);
  });

  it("never orders across tenants: a tenant's high priority does not take another tenant's share", async () => {
    await tenants('hi', 'lo');
    await runs.createRuns(
      'hi',
      Array.from({ length: 10 }, (_, k) => ({
        dagId: 'fan',
        inputs: {},
        runToken: `h${k}`,
        requestedBy: 'me',
        priority: 9,
      })),
    );
    await runs.createRuns(
      'lo',
      Array.from({ length: 10 }, (_, k) => ({
        dagId: 'fan',
        inputs: {},
        runToken: `l${k}`,
        requestedBy: 'me',
        priority: 0,
      })),
    );
    const got = await claim(8, ['hi', 'lo']);
    const count = (tid: string) => got.filter((d) => d.tenant_id === tid).length;
    expect([count('hi'), count('lo')]).toEqual([4, 4]);
  });

  it('keeps a scheduled run out of the queue until it is started, then starts it as any run (20 runs, same events)', async () => {
    await tenants('sched');
    const notBefore = new Date(Date.now() + 3_600_000).toISOString();
    const shapes: string[] = [];
    for (let i = 0; i < 20; i++) {
      const [r] = await runs.createRuns('sched', [
        { dagId: 'fan', inputs: {}, runToken: `s${i}`, requestedBy: 'me', notBefore, priority: 3 },
      ]);
      expect(r.status).toBe('scheduled');
      const job = await owner.query<{ run_at: Date }>(
        `select run_at from graphile_worker.jobs where key = $1 and task_identifier = 'ordo.engine.start_run'`,
        [`start:sched:${r.runId}`],
      );
      expect(job.rows.map((j) => j.run_at.toISOString())).toEqual([notBefore]);
      expect((await claim(16, ['sched'])).length).toBe(0);
      expect(
        (await owner.query('select 1 from queue_item where tenant_id = $1 and run_id = $2', ['sched', r.runId]))
          .rowCount,
      ).toBe(0);

      const started = await owner.query<{ ok: boolean }>('select ordo_start_scheduled($1, $2) as ok', [
        'sched',
        r.runId,
      ]);
      expect(started.rows[0].ok).toBe(true);
      // Started once: the job's second try changes nothing.
      const again = await owner.query<{ ok: boolean }>('select ordo_start_scheduled($1, $2) as ok', ['sched', r.runId]);
      expect(again.rows[0].ok).toBe(false);
      const got = await claim(16, ['sched']);
      expect(got.map((d) => d.step_id)).toEqual(['b', 'a', 'c']);
      const ev = await events('sched', r.runId);
      // (Each run has its own token and trace id; everything else is the same.)
      const same = (d: unknown) => {
        const { traceId: _t, runToken: _r, ...rest } = d as Record<string, unknown>;
        return rest;
      };
      shapes.push(JSON.stringify(ev.map((e) => [e.type, e.step_id, same(e.data)])));
    }
    expect(JSON.parse(shapes[0])).toEqual([
      ['run.created', null, expect.objectContaining({ priority: 3, notBefore })],
      ['run.scheduled', null, { notBefore }],
      ['run.queued', null, { reason: 'not_before' }],
      ['step.queued', 'a', {}],
      ['step.queued', 'b', {}],
      ['step.queued', 'c', {}],
      ['run.running', null, {}],
      ['step.running', 'b', expect.objectContaining({ dispatchSeq: 1 })],
      ['step.running', 'a', expect.objectContaining({ dispatchSeq: 2 })],
      ['step.running', 'c', expect.objectContaining({ dispatchSeq: 3 })],
    ]);
    for (const s of shapes) expect(s).toBe(shapes[0]);
  });

  it('leaves a scheduled run that was cancelled as it is when its start job runs', async () => {
    await tenants('cancel');
    const [r] = await runs.createRuns('cancel', [
      {
        dagId: 'fan',
        inputs: {},
        runToken: 'c',
        requestedBy: 'me',
        notBefore: new Date(Date.now() + 60_000).toISOString(),
      },
    ]);
    const cancelled = await runs.cancel('cancel', r.runId, 'me');
    expect(cancelled.status).toBe('cancelled');
    const started = await owner.query<{ ok: boolean }>('select ordo_start_scheduled($1, $2) as ok', [
      'cancel',
      r.runId,
    ]);
    expect(started.rows[0].ok).toBe(false);
    const steps = await owner.query<{ status: string }>(
      'select distinct status from step where tenant_id = $1 and run_id = $2',
      ['cancel', r.runId],
    );
    expect(steps.rows.map((s) => s.status)).toEqual(['cancelled']);
    expect((await claim(16, ['cancel'])).length).toBe(0);
    expect((await events('cancel', r.runId)).map((e) => e.type)).toEqual([
      'run.created',
      'run.scheduled',
      'step.cancelled',
      'step.cancelled',
      'step.cancelled',
      'step.cancelled',
      'run.cancelled',
    ]);
  });
});
