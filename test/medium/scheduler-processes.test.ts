import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { canonicalHash } from '../../src/core/json/canonical-json';
import { projectRoot } from '../../src/core/home/project-root';
import type { TenantPrincipalT } from '../../src/core/http/request-context';
import { dagDefinition } from '../../src/modules/dags/dag-definition';
import { DagsRepository } from '../../src/modules/dags/dags.repository';
import { ManualClock } from '../../src/modules/scheduler/clock';
import { scheduleRunToken } from '../../src/modules/scheduler/schedule-runner';
import { SchedulesRepository } from '../../src/modules/scheduler/schedules.repository';
import { SchedulesService } from '../../src/modules/scheduler/schedules.service';
import { buildPrivateDist } from '../support/dist';
import { createTestDatabase, type TestDatabase } from '../support/test-database';

const TENANT = 'sched-proc';
const START = Date.parse('2026-06-01T00:00:00.000Z');
/** Virtual seconds per real second in the scheduler processes. */
const SPEED = 2;
const principal: TenantPrincipalT = {
  kind: 'tenant',
  tenantId: TENANT,
  subject: 'tester',
  scopes: ['orchestrator:admin'],
  jti: randomUUID(),
};
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface Proc {
  child: ChildProcess;
  output: () => string;
  exited: Promise<number | null>;
}

/** Two (or more) scheduler processes against one database, sharing a virtual clock. */
describe('scheduler processes', () => {
  let t: TestDatabase;
  let dist: ReturnType<typeof buildPrivateDist>;
  let home: string;
  let service: SchedulesService;
  const clock = new ManualClock(new Date(START));
  const procs: Proc[] = [];

  const startScheduler = (clockStart: number, anchor: number): Proc => {
    const child = spawn(path.join(projectRoot(), 'node_modules', '.bin', 'node'), [dist.main], {
      env: {
        PATH: process.env.PATH,
        ORDO_ROLES: 'scheduler',
        HOST: '127.0.0.1',
        PORT: '0',
        ORDO_HOME: home,
        ORDO_APP_DATABASE_URL: t.appUrl,
        ORDO_SYSTEM_DATABASE_URL: t.systemUrl,
        ORDO_DB_POOL_SIZE: '4',
        LOG_LEVEL: 'debug',
        ORDO_TEST_CLOCK_START: new Date(clockStart).toISOString(),
        ORDO_TEST_CLOCK_ANCHOR: String(anchor),
        ORDO_TEST_CLOCK_SPEED: String(SPEED),
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (out += d.toString()));
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    const p = { child, output: () => out, exited };
    procs.push(p);
    return p;
  };
  const stop = async (p: Proc, signal: NodeJS.Signals = 'SIGTERM') => {
    if (p.child.exitCode === null && p.child.signalCode === null) p.child.kill(signal);
    const timer = setTimeout(() => p.child.kill('SIGKILL'), 15_000);
    await p.exited;
    clearTimeout(timer);
  };
  const waitReady = async (p: Proc) => {
    const deadline = Date.now() + 30_000;
    while (!p.output().includes('Ordo is running')) {
      if (p.child.exitCode !== null || Date.now() > deadline)
        throw new Error(`scheduler did not start:\n${p.output()}`);
      await sleep(50);
    }
  };
  /** Waits (real time) until the processes' virtual clock, anchored at `anchor`, reaches `virtual`. */
  const waitVirtual = (clockStart: number, anchor: number, virtual: number) =>
    sleep(Math.max(0, anchor + (virtual - clockStart) / SPEED - Date.now()));

  const fires = (scheduleId: string) =>
    t.db.withTenant(TENANT, (tx) =>
      tx
        .selectFrom('schedule_fire')
        .select(['fire_time', 'run_id', 'outcome'])
        .where('tenant_id', '=', TENANT)
        .where('schedule_id', '=', scheduleId)
        .orderBy('fire_time')
        .execute(),
    );
  const runTokens = async (scheduleId: string) =>
    (
      await t.db.withTenant(TENANT, (tx) =>
        tx
          .selectFrom('run')
          .select(['run_token'])
          .where('tenant_id', '=', TENANT)
          .where('run_token', 'like', `schedule:${scheduleId}:%`)
          .execute(),
      )
    )
      .map((r) => r.run_token)
      .sort();

  beforeAll(async () => {
    dist = buildPrivateDist();
    home = fs.mkdtempSync(path.join(os.tmpdir(), 'ordo-sched-'));
    t = await createTestDatabase();
    await t.db.system.insertInto('tenant').values({ id: TENANT, name: TENANT }).execute();
    const def = dagDefinition.parse({ id: 'beat', steps: [{ id: 'a', plugin: 'noop' }] });
    const dags = new DagsRepository();
    await t.db.withTenant(TENANT, async (tx) => {
      await dags.lockDag(tx, 'beat');
      await dags.insertVersion(tx, {
        dagId: 'beat',
        version: 1,
        contentHash: canonicalHash(def),
        definition: def,
        sourceFormat: 'json',
        owner: 'test',
        signature: null,
        bundleHash: null,
      });
    });
    service = new SchedulesService(t.db, new SchedulesRepository(), new DagsRepository(), clock);
  }, 120_000);

  afterAll(async () => {
    await Promise.all(procs.map((p) => stop(p, 'SIGKILL')));
    await t?.drop();
    dist?.remove();
    if (home) fs.rmSync(home, { recursive: true, force: true });
  });

  it('two processes create exactly one run per second of a 6-field schedule, none missed, even when one is killed; catch-up after downtime', async () => {
    const base = { dagId: 'beat', timezone: 'UTC', inputs: {}, overlap: 'allow' as const, paused: false };
    const everySecond = await service.create(principal, { ...base, cron: '* * * * * *', catchUp: 'none' });
    const minutely = {
      none: await service.create(principal, { ...base, cron: '0 * * * * *', catchUp: 'none' }),
      latest: await service.create(principal, { ...base, cron: '0 * * * * *', catchUp: 'latest' }),
      all: await service.create(principal, { ...base, cron: '0 * * * * *', catchUp: 'all' }),
    };

    // Phase 1: virtual time starts at START a few real seconds from now, once both have booted.
    const anchor1 = Date.now() + 4_000;
    const a = startScheduler(START, anchor1);
    const b = startScheduler(START, anchor1);
    await Promise.all([waitReady(a), waitReady(b)]);
    await waitVirtual(START, anchor1, START + 10_000);
    // A crash mid-way: the process that has been handling fires is killed, the other takes over.
    const handledMark = `schedule ${TENANT}/${everySecond.id}: handled`;
    const [victim, survivor] = b.output().includes(handledMark) ? [b, a] : [a, b];
    expect(victim.output()).toContain(handledMark);
    await stop(victim, 'SIGKILL');
    const survivorBefore = survivor.output().length;
    await waitVirtual(START, anchor1, START + 20_000);
    await stop(survivor);

    const f1 = await fires(everySecond.id);
    const last = Date.parse(f1.at(-1)!.fire_time as unknown as string);
    const expected = Array.from({ length: (last - START) / 1000 }, (_, i) => new Date(START + (i + 1) * 1000));
    expect(expected.length).toBeGreaterThanOrEqual(15);
    expect(f1.map((f) => new Date(f.fire_time as unknown as string).toISOString())).toEqual(
      expected.map((d) => d.toISOString()),
    );
    expect(f1.every((f) => f.outcome === 'created')).toBe(true);
    expect(await runTokens(everySecond.id)).toEqual(expected.map((d) => scheduleRunToken(everySecond.id, d)).sort());
    for (const s of Object.values(minutely)) expect(await fires(s.id)).toEqual([]);
    // Both processes handled fires of the same schedule: the survivor after the kill.
    expect(survivor.output().slice(survivorBefore)).toContain(handledMark);

    // Downtime: nothing runs until START + 10 min; then two processes come back.
    await service.setPaused(principal, everySecond.id, true);
    const start2 = START + 600_000 + 4_000;
    const anchor2 = Date.now() + 1_000;
    const c = startScheduler(start2, anchor2);
    const d = startScheduler(start2, anchor2);
    await Promise.all([waitReady(c), waitReady(d)]);
    await waitVirtual(start2, anchor2, start2 + 12_000);
    await Promise.all([stop(c), stop(d)]);

    const minute = (m: number) => scheduleRunToken('', new Date(START + m * 60_000));
    const tokensOf = async (id: string) => (await runTokens(id)).map((tok) => tok.replace(id, ''));
    expect(await tokensOf(minutely.none.id)).toEqual([minute(10)]);
    expect(await tokensOf(minutely.latest.id)).toEqual([minute(9), minute(10)]);
    expect(await tokensOf(minutely.all.id)).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10].map(minute));
    // The paused schedule stayed silent.
    expect(await fires(everySecond.id)).toHaveLength(f1.length);
    for (const p of [a, b, c, d]) expect(p.output()).not.toMatch(/tick failed|"level":"error"/);
  }, 120_000);
});
