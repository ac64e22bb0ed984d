import { Logger } from '@nestjs/common';
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { Database } from '../../src/core/database/database';
import { canonicalHash } from '../../src/core/json/canonical-json';
import { dagDefinition } from '../../src/modules/dags/dag-definition';
import { DagsRepository } from '../../src/modules/dags/dags.repository';
import { RunsRepository } from '../../src/modules/runs/runs.repository';
import { RunsService } from '../../src/modules/runs/runs.service';
import { ManualClock, SystemClock } from '../../src/modules/scheduler/clock';
import { CATCH_UP_ALL_LIMIT } from '../../src/modules/scheduler/fire-plan';
import { RunsScheduleRunner } from '../../src/modules/scheduler/runs-schedule-runner';
import { scheduleRunToken } from '../../src/modules/scheduler/schedule-runner';
import { SchedulerLoop } from '../../src/modules/scheduler/scheduler-loop';
import { SchedulesRepository, type CatchUp, type Overlap } from '../../src/modules/scheduler/schedules.repository';
import { SchedulesService } from '../../src/modules/scheduler/schedules.service';
import type { TenantPrincipalT } from '../../src/core/http/request-context';
import { createTestDatabase, type TestDatabase } from '../support/test-database';

const T0 = new Date('2026-06-01T00:00:00.000Z');
const TENANT = 'sched-a';
const principal: TenantPrincipalT = {
  kind: 'tenant',
  tenantId: TENANT,
  subject: 'tester',
  scopes: ['orchestrator:admin'],
  jti: randomUUID(),
};

interface Harness {
  db: Database;
  loop: SchedulerLoop;
  runs: RunsService;
}

describe('scheduler loop', () => {
  let t: TestDatabase;
  let clock: ManualClock;
  let a: Harness;
  let b: Harness;
  let service: SchedulesService;

  const harness = (db: Database): Harness => {
    const runsRepo = new RunsRepository();
    const runs = new RunsService(db, runsRepo, new DagsRepository());
    const loop = new SchedulerLoop(db, new SchedulesRepository(), new RunsScheduleRunner(db, runs, runsRepo), clock);
    return { db, loop, runs };
  };

  beforeAll(async () => {
    // The loop's per-fire debug and catch-up warnings are expected here; errors still print.
    Logger.overrideLogger(['error', 'fatal']);
    t = await createTestDatabase();
    clock = new ManualClock(T0);
    await t.db.system.insertInto('tenant').values({ id: TENANT, name: TENANT }).execute();
    const def = dagDefinition.parse({ id: 'tick', steps: [{ id: 'a', plugin: 'noop' }] });
    const dags = new DagsRepository();
    await t.db.withTenant(TENANT, async (tx) => {
      await dags.lockDag(tx, 'tick');
      await dags.insertVersion(tx, {
        dagId: 'tick',
        version: 1,
        contentHash: canonicalHash(def),
        definition: def,
        sourceFormat: 'json',
        owner: 'test',
        signature: null,
        bundleHash: null,
      });
    });
    // Two schedulers, each with its own connection pools, as two processes would have.
    a = harness(t.db);
    b = harness(new Database({ app: t.appUrl, system: t.systemUrl }, { poolSize: 6, applicationName: 'ordo:test-b' }));
    service = new SchedulesService(t.db, new SchedulesRepository(), new DagsRepository(), clock);
  });
  afterAll(async () => {
    await b.db.close();
    await t.drop();
  });

  const schedule = async (cron: string, opts: { catchUp?: CatchUp; overlap?: Overlap } = {}) => {
    clock.set(T0);
    return service.create(principal, {
      dagId: 'tick',
      cron,
      timezone: 'UTC',
      inputs: { n: 1 },
      catchUp: opts.catchUp ?? 'none',
      overlap: opts.overlap ?? 'allow',
      paused: false,
    });
  };
  const runsOf = (scheduleId: string) =>
    t.db.withTenant(TENANT, (tx) =>
      tx
        .selectFrom('run')
        .select(['run_id', 'run_token', 'status'])
        .where('tenant_id', '=', TENANT)
        .where('run_token', 'like', `schedule:${scheduleId}:%`)
        .orderBy('run_token')
        .execute(),
    );
  const firesOf = async (scheduleId: string) => (await service.fires(principal, scheduleId, 500)).items.reverse();
  const at = (ms: number) => new Date(T0.getTime() + ms);
  const tokenAt = (id: string, ms: number) => scheduleRunToken(id, at(ms));
  const tickBoth = () => Promise.all([a.loop.tick(), b.loop.tick()]);

  it('creates exactly one run per fire time of an every-second schedule with two schedulers ticking at once', async () => {
    const s = await schedule('* * * * * *');
    // Uneven steps: sometimes several fire times come due at once, sometimes none.
    const steps = [1000, 1000, 250, 250, 500, 3000, 1000, 700, 300, 2000, 1000, 1000, 4000, 1000, 1000];
    let elapsed = 0;
    for (const step of steps) {
      elapsed += step;
      clock.set(at(elapsed));
      await Promise.all([tickBoth(), tickBoth()]);
    }
    const expected = Array.from({ length: Math.floor(elapsed / 1000) }, (_, i) => tokenAt(s.id, (i + 1) * 1000));
    const runs = await runsOf(s.id);
    expect(runs.map((r) => r.run_token)).toEqual(expected.sort());
    const fires = await firesOf(s.id);
    expect(fires.map((f) => f.fireTime)).toEqual(expected.map((_, i) => at((i + 1) * 1000).toISOString()));
    expect(fires.every((f) => f.outcome === 'created' && f.runId !== null)).toBe(true);
    expect(new Set(fires.map((f) => f.runId)).size).toBe(fires.length);
    await service.delete(principal, s.id);
  });

  it('records an already created run for a fire once when a scheduler died after creating it', async () => {
    const s = await schedule('0 * * * * *');
    // A scheduler created the run of the 00:01:00 fire, then died before recording it.
    const pre = await a.runs.createRun(TENANT, {
      dagId: 'tick',
      inputs: { n: 1 },
      runToken: tokenAt(s.id, 60_000),
      requestedBy: `schedule:${s.id}`,
    });
    clock.set(at(60_000));
    await tickBoth();
    const runs = await runsOf(s.id);
    expect(runs.map((r) => r.run_id)).toEqual([pre.runId]);
    expect((await firesOf(s.id)).map((f) => [f.outcome, f.runId])).toEqual([['created', pre.runId]]);
    await service.delete(principal, s.id);
  });

  it.each<[CatchUp, number[]]>([
    ['none', []],
    ['latest', [600_000]],
    ['all', [60_000, 120_000, 180_000, 240_000, 300_000, 360_000, 420_000, 480_000, 540_000, 600_000]],
  ])('after ten minutes of downtime, catch-up %s runs the fire times %j', async (catchUp, expectedMs) => {
    const s = await schedule('0 * * * * *', { catchUp });
    clock.set(at(600_000 + 40_000));
    await tickBoth();
    expect((await runsOf(s.id)).map((r) => r.run_token)).toEqual(expectedMs.map((ms) => tokenAt(s.id, ms)).sort());
    expect((await firesOf(s.id)).map((f) => f.fireTime)).toEqual(expectedMs.map((ms) => at(ms).toISOString()));
    // Afterwards the schedule continues on time.
    clock.set(at(660_000));
    await tickBoth();
    expect((await runsOf(s.id)).map((r) => r.run_token)).toContain(tokenAt(s.id, 660_000));
    expect((await service.get(principal, s.id)).nextFireAt).toBe(at(720_000).toISOString());
    await service.delete(principal, s.id);
  });

  it(`catches up at most ${CATCH_UP_ALL_LIMIT} missed fires, the oldest first`, async () => {
    const s = await schedule('* * * * * *', { catchUp: 'all' });
    clock.set(at(500_000));
    await tickBoth();
    const fires = await firesOf(s.id);
    const missed = fires.filter((f) => Date.parse(f.fireTime) < at(500_000 - 30_000).getTime());
    expect(missed.map((f) => f.fireTime)).toEqual(
      Array.from({ length: CATCH_UP_ALL_LIMIT }, (_, i) => at((i + 1) * 1000).toISOString()),
    );
    // The on-time fires of the last 30 s are all there as well.
    expect(fires).toHaveLength(CATCH_UP_ALL_LIMIT + 31);
    expect(await runsOf(s.id)).toHaveLength(CATCH_UP_ALL_LIMIT + 31);
    await service.delete(principal, s.id);
  });

  it('overlap skip: a fire is skipped while the previous run is active, and runs again once it ended', async () => {
    const s = await schedule('0 * * * * *', { overlap: 'skip' });
    clock.set(at(60_000));
    await tickBoth();
    clock.set(at(120_000));
    await tickBoth();
    const [first] = await runsOf(s.id);
    expect((await firesOf(s.id)).map((f) => f.outcome)).toEqual(['created', 'skipped']);
    await a.runs.cancel(TENANT, first.run_id, 'test');
    clock.set(at(180_000));
    await tickBoth();
    expect((await firesOf(s.id)).map((f) => f.outcome)).toEqual(['created', 'skipped', 'created']);
    expect((await runsOf(s.id)).map((r) => r.run_token)).toEqual([tokenAt(s.id, 60_000), tokenAt(s.id, 180_000)]);
    await service.delete(principal, s.id);
  });

  it('overlap cancel-previous: the active run is cancelled and the new one created', async () => {
    const s = await schedule('0 * * * * *', { overlap: 'cancel-previous' });
    clock.set(at(60_000));
    await tickBoth();
    clock.set(at(120_000));
    await tickBoth();
    const runs = await runsOf(s.id);
    expect(runs.map((r) => [r.run_token, r.status])).toEqual([
      [tokenAt(s.id, 60_000), 'cancelled'],
      [tokenAt(s.id, 120_000), 'queued'],
    ]);
    expect((await firesOf(s.id)).map((f) => f.outcome)).toEqual(['created', 'cancelled-previous']);
    await service.delete(principal, s.id);
  });

  it('overlap queue: one fire waits for the previous run, later ones are skipped, and it starts when the previous ends', async () => {
    const s = await schedule('0 * * * * *', { overlap: 'queue' });
    for (const ms of [60_000, 120_000, 180_000]) {
      clock.set(at(ms));
      await tickBoth();
    }
    expect((await firesOf(s.id)).map((f) => f.outcome)).toEqual(['created', 'queued', 'skipped']);
    expect((await service.get(principal, s.id)).queuedFireAt).toBe(at(120_000).toISOString());
    const [first] = await runsOf(s.id);
    await a.runs.cancel(TENANT, first.run_id, 'test');
    clock.set(at(190_000));
    await tickBoth();
    expect((await firesOf(s.id)).map((f) => f.outcome)).toEqual(['created', 'created', 'skipped']);
    expect((await runsOf(s.id)).map((r) => r.run_token)).toEqual(
      [tokenAt(s.id, 120_000), tokenAt(s.id, 60_000)].sort(),
    );
    expect((await service.get(principal, s.id)).queuedFireAt).toBeNull();
    await service.delete(principal, s.id);
  });

  it('pause stops fires; resume continues under the catch-up policy', async () => {
    const s = await schedule('0 * * * * *', { catchUp: 'latest' });
    clock.set(at(60_000));
    await tickBoth();
    await service.setPaused(principal, s.id, true);
    clock.set(at(400_000));
    expect((await tickBoth()).every((r) => r.fires === 0)).toBe(true);
    expect(await runsOf(s.id)).toHaveLength(1);
    await service.setPaused(principal, s.id, false);
    clock.set(at(401_000));
    await tickBoth();
    expect((await firesOf(s.id)).map((f) => f.fireTime)).toEqual([at(60_000).toISOString(), at(360_000).toISOString()]);
    clock.set(at(420_000));
    await tickBoth();
    expect((await runsOf(s.id)).map((r) => r.run_token)).toEqual(
      [60_000, 360_000, 420_000].map((ms) => tokenAt(s.id, ms)).sort(),
    );
    await service.delete(principal, s.id);
  });

  it('resume with catch-up none skips every fire time that came due while paused, even within the grace period', async () => {
    const s = await schedule('* * * * * *', { catchUp: 'none' });
    clock.set(at(2_000));
    await tickBoth();
    await service.setPaused(principal, s.id, true);
    clock.set(at(12_000));
    await tickBoth();
    const resumed = await service.setPaused(principal, s.id, false);
    expect(resumed.nextFireAt).toBe(at(13_000).toISOString());
    clock.set(at(14_000));
    await tickBoth();
    expect((await firesOf(s.id)).map((f) => f.fireTime)).toEqual(
      [1_000, 2_000, 13_000, 14_000].map((ms) => at(ms).toISOString()),
    );
    await service.delete(principal, s.id);
  });

  it("does not fire a disabled tenant's schedules until the tenant is enabled again", async () => {
    const s = await schedule('0 * * * * *', { catchUp: 'latest' });
    const setStatus = (status: 'active' | 'disabled') =>
      t.db.system
        .updateTable('tenant')
        .set({ status, disabled_at: status === 'disabled' ? new Date() : null })
        .where('id', '=', TENANT)
        .execute();
    await setStatus('disabled');
    try {
      clock.set(at(120_000));
      expect((await tickBoth()).every((r) => r.fires === 0)).toBe(true);
    } finally {
      await setStatus('active');
    }
    clock.set(at(121_000));
    await tickBoth();
    expect((await firesOf(s.id)).map((f) => f.fireTime)).toEqual([at(60_000).toISOString(), at(120_000).toISOString()]);
    await service.delete(principal, s.id);
  });

  it('records a fire as failed when the DAG version it names is disabled, and keeps going', async () => {
    const s = await schedule('0 * * * * *');
    await t.db.withTenant(TENANT, (tx) => new DagsRepository().setStatus(tx, 'tick', 1, 'disabled', 'test'));
    try {
      clock.set(at(60_000));
      await tickBoth();
      const [fire] = await firesOf(s.id);
      expect(fire.outcome).toBe('failed');
      expect(fire.error).toMatch(/DAG/);
      expect((await service.get(principal, s.id)).nextFireAt).toBe(at(120_000).toISOString());
    } finally {
      await t.db.withTenant(TENANT, (tx) => new DagsRepository().setStatus(tx, 'tick', 1, 'active', 'test'));
      await service.delete(principal, s.id);
    }
  });

  it('connects its NOTIFY listener again after the connection is killed', async () => {
    const admin = new pg.Client({ connectionString: t.ownerUrl });
    await admin.connect();
    const loop = new SchedulerLoop(
      t.db,
      new SchedulesRepository(),
      new RunsScheduleRunner(t.db, a.runs, new RunsRepository()),
      new SystemClock(),
    );
    const listeners = async () =>
      (
        await admin.query<{ pid: number }>(
          `select pid from pg_stat_activity where datname = current_database() and application_name = 'ordo:scheduler:listen'`,
        )
      ).rows.map((r) => r.pid);
    const waitFor = async (check: (pids: number[]) => boolean) => {
      const deadline = Date.now() + 20_000;
      for (;;) {
        const pids = await listeners();
        if (check(pids)) return pids;
        if (Date.now() > deadline) throw new Error(`listener state not reached: ${JSON.stringify(pids)}`);
        await new Promise((r) => setTimeout(r, 100));
      }
    };
    try {
      await loop.start();
      const [first] = await waitFor((pids) => pids.length === 1);
      await admin.query('select pg_terminate_backend($1)', [first]);
      const again = await waitFor((pids) => pids.length === 1 && pids[0] !== first);
      expect(again[0]).not.toBe(first);
      await loop.stop();
      // Stopping closes the listener.
      expect(await waitFor((pids) => pids.length === 0)).toEqual([]);
    } finally {
      await loop.stop();
      await admin.end();
    }
  });
});
