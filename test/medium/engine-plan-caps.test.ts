import pg from 'pg';
import { ArtifactsRepository, jsonArtifact } from '../../src/modules/artifacts/artifacts.repository';
import { DagsRepository } from '../../src/modules/dags/dags.repository';
import { EngineRepository } from '../../src/modules/engine/engine.repository';
import { EngineStore, type ClaimedWork } from '../../src/modules/engine/engine.store';
import { RunsRepository } from '../../src/modules/runs/runs.repository';
import { RunsService } from '../../src/modules/runs/runs.service';
import { publishDagVersion } from '../support/publish-dag';
import { createTestDatabase, type TestDatabase } from '../support/test-database';

/**
 * A tenant's plan sets its cap of steps in flight and its fair-share weight; the claim, the hop and
 * the chain read them from the tenant's queue row (ordo_plan_sync, ordo_in_flight_cap), so a plan
 * change applies from the commit that makes it.
 */
describe('engine: caps and weights from tenant plans', () => {
  let t: TestDatabase;
  let owner: pg.Client;
  let store: EngineStore;
  let runs: RunsService;
  let n = 0;

  beforeAll(async () => {
    t = await createTestDatabase();
    owner = new pg.Client({ connectionString: t.ownerUrl });
    await owner.connect();
    store = new EngineStore(t.db, new EngineRepository(), new ArtifactsRepository());
    runs = new RunsService(t.db, new RunsRepository(), new DagsRepository());
  });
  afterAll(async () => {
    await owner.end();
    await t.drop();
  });

  /** A new tenant on a new plan with `limits`, with `queued` runs of a one-step DAG waiting. */
  async function tenantOnPlan(limits: Record<string, number>, queued: number): Promise<string> {
    const id = `t${++n}`;
    await owner.query(`insert into tenant (id, name) values ($1, $1)`, [id]);
    await owner.query(`insert into plan (id, limits) values ($1, $2)`, [`p-${id}`, limits]);
    await owner.query(`insert into tenant_plan (tenant_id, plan_id) values ($1, $2)`, [id, `p-${id}`]);
    await owner.query(`select ordo_plan_sync(array[$1])`, [id]);
    await publishDagVersion(t.db, id, { id: 'one', steps: [{ id: 'x', plugin: 'noop' }] });
    await publishDagVersion(t.db, id, {
      id: 'two',
      steps: [
        { id: 'a', plugin: 'noop' },
        { id: 'b', plugin: 'noop', dependsOn: ['a'] },
      ],
    });
    if (queued > 0)
      await runs.createRuns(
        id,
        Array.from({ length: queued }, (_, k) => ({ dagId: 'one', inputs: {}, runToken: `r${k}`, requestedBy: 'me' })),
      );
    return id;
  }

  const claim = (tenants: string[], capacity: number, tenantCap = 64, sharedCap?: number) =>
    store.claimNow({
      workerId: 'w',
      capacity,
      leaseMs: 60_000,
      tenantCap,
      ...(sharedCap !== undefined && { sharedCap }),
      onlyTenants: tenants,
    });
  const countBy = (ws: ClaimedWork[]) =>
    ws.reduce<Record<string, number>>((m, w) => ({ ...m, [w.tenantId]: (m[w.tenantId] ?? 0) + 1 }), {});

  it("caps a tenant at its plan's steps in flight below the instance's cap", async () => {
    const a = await tenantOnPlan({ maxStepsInFlight: 2 }, 5);
    expect(countBy(await claim([a], 10))).toEqual({ [a]: 2 });
    // At its cap, a further claim gets nothing until a step ends.
    expect(await claim([a], 10)).toEqual([]);
  });

  it("lets a plan's cap exceed the instance's", async () => {
    const a = await tenantOnPlan({ maxStepsInFlight: 6 }, 8);
    expect(countBy(await claim([a], 20, 3))).toEqual({ [a]: 6 });
  });

  it('keeps the instance cap for a tenant whose plan sets none', async () => {
    const a = await tenantOnPlan({ monthlyRuns: 1000 }, 8);
    expect(countBy(await claim([a], 20, 3))).toEqual({ [a]: 3 });
  });

  it('splits scarce room by the plans’ weights', async () => {
    const heavy = await tenantOnPlan({ weight: 3 }, 20);
    const light = await tenantOnPlan({ weight: 1 }, 20);
    const claimed = await claim([heavy, light], 8);
    expect(countBy(claimed)).toEqual({ [heavy]: 6, [light]: 2 });
    // In the order the worker runs them: interleaved by weight, so neither tenant's steps wait
    // behind all of the other's.
    expect(claimed.map((w) => (w.tenantId === heavy ? 'h' : 'l')).join('')).toBe('hhhlhhhl');
  });

  it('scales the shared cap by weight while tenants share the engine', async () => {
    const heavy = await tenantOnPlan({ weight: 3 }, 20);
    const light = await tenantOnPlan({ weight: 1 }, 20);
    // Room for all: each tenant stops at the shared cap times its weight.
    expect(countBy(await claim([heavy, light], 100, 64, 2))).toEqual({ [heavy]: 6, [light]: 2 });
    // A plan's own cap below that still holds.
    const small = await tenantOnPlan({ weight: 3, maxStepsInFlight: 4 }, 20);
    expect(countBy(await claim([small], 100, 64, 2))).toEqual({ [small]: 4 });
  });

  it('applies a plan change at the next claim', async () => {
    const a = await tenantOnPlan({ maxStepsInFlight: 1 }, 6);
    expect(countBy(await claim([a], 10))).toEqual({ [a]: 1 });
    await owner.query(`update plan set limits = '{"maxStepsInFlight": 4}' where id = $1`, [`p-${a}`]);
    await owner.query(`select ordo_plan_sync(array[$1])`, [a]);
    expect(countBy(await claim([a], 10))).toEqual({ [a]: 3 });
    // Overrides on top of the plan.
    await owner.query(`update tenant_plan set overrides = '{"maxStepsInFlight": 5}' where tenant_id = $1`, [a]);
    await owner.query(`select ordo_plan_sync(array[$1])`, [a]);
    expect(countBy(await claim([a], 10))).toEqual({ [a]: 1 });
  });

  it("holds a hop's successors in the queue at the plan's cap", async () => {
    const a = await tenantOnPlan({ maxStepsInFlight: 1 }, 0);
    const run = await runs.createRun(a, { dagId: 'two', inputs: {}, runToken: 'hop', requestedBy: 'me' });
    const [first] = await claim([a], 4);
    expect(first.stepId).toBe('a');
    // Another step of the tenant runs elsewhere: with a's slot freed, the tenant is at its cap of 1.
    await owner.query(
      `insert into queue_item (tenant_id, run_id, step_id, state, worker_id, epoch, lease_expires_at)
       values ($1, gen_random_uuid(), 'elsewhere', 'leased', 'w2', 1, now() + interval '1 hour')`,
      [a],
    );
    const outputs = { run: first.runId };
    const out = jsonArtifact(a, outputs);
    const hop = {
      worker: 'w',
      leaseMs: 60_000,
      capacity: 4,
      cap: 64,
      head: {
        tenant_id: a,
        run_id: first.runId,
        step_id: first.stepId,
        attempt: first.attempt,
        epoch: first.epoch,
        status: 'succeeded',
        outputs,
        outputs_hash: out.sha256,
        logs_hash: null,
        ord: 1,
      },
      artifacts: [{ tenant_id: a, sha256: out.sha256, media_type: out.mediaType, body: out.json }],
    };
    const c = new pg.Client({ connectionString: t.systemUrl });
    await c.connect();
    try {
      const r = await c.query('select kind, item from ordo_engine_chain($1::jsonb)', [JSON.stringify(hop)]);
      expect(r.rows.filter((x: { kind: string }) => x.kind === 'dispatch')).toEqual([]);
    } finally {
      await c.end();
    }
    const q = await owner.query(`select step_id, state from queue_item where run_id = $1`, [run.runId]);
    expect(q.rows).toEqual([{ step_id: 'b', state: 'ready' }]);
  });
});
