import { createHash } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { sql } from 'kysely';
import pg from 'pg';
import type { OrdoConfig } from '../../src/core/config/config';
import { SigningKeys } from '../../src/modules/auth/signing-keys';
import { ExportRepository } from '../../src/modules/export/export.repository';
import { ExportService } from '../../src/modules/export/export.service';
import { PlansRepository } from '../../src/modules/plans/plans.repository';
import { QuotaChecks } from '../../src/modules/plans/quota-checks';
import { TenantLimits } from '../../src/modules/plans/tenant-limits';
import { RetentionRepository } from '../../src/modules/retention/retention.repository';
import { verifyChain } from '../../src/modules/runs/run-events';
import {
  MAX_BATCHES_PER_TENANT,
  RETENTION_BATCH,
  RetentionService,
  type RetentionPass,
} from '../../src/modules/retention/retention.service';
import { appendEvents, insertRun, insertStepWithAttempt, type FactoryRun } from '../factories/run-events';
import { chainedEvent, RUN_EVENT_COLUMNS, type RunEventRow } from '../support/run-event-rows';
import { createTestDatabase, type TestDatabase } from '../support/test-database';

const DAY = 86_400_000;

describe('retention by partition and by batches', () => {
  let t: TestDatabase;
  let tmp: string;
  const repo = new RetentionRepository();
  const service = (requiresExport = false, days?: number, roles: string[] = []) =>
    new RetentionService(
      {
        ORDO_ROLES: roles,
        ORDO_RETENTION_INTERVAL_MS: 3_600_000,
        ORDO_RETENTION_DAYS: days,
        ORDO_RETENTION_REQUIRES_EXPORT: requiresExport,
      } as unknown as OrdoConfig,
      t.db,
      repo,
    );

  /** A finished (or running) run with three chained events, a step, its attempt, its logs artifact and a span. */
  async function run(
    tenant: string,
    at: Date,
    opts: { status?: string; logs?: string; dag?: string } = {},
  ): Promise<FactoryRun> {
    const status = opts.status ?? 'succeeded';
    const ended = status !== 'running';
    const r = await insertRun(t.db.system, tenant, opts.dag ?? 'd', {
      createdAt: at,
      startedAt: at,
      finishedAt: ended ? new Date(at.getTime() + 5000) : null,
      status,
    });
    await appendEvents(t.db.system, r, [
      { type: 'run.created', createdAt: at },
      { type: 'run.running', createdAt: new Date(at.getTime() + 1000) },
      ...(ended ? [{ type: `run.${status}`, createdAt: new Date(at.getTime() + 5000) }] : []),
    ]);
    await insertStepWithAttempt(t.db.system, r, 'one', {
      logs: opts.logs ?? `logs of ${r.runId}`,
      at: new Date(at.getTime() + 4000),
      status: ended ? 'succeeded' : 'running',
    });
    return r;
  }

  /** Whether a run's events are numbered 1..n without gaps and hash-chained up to the head on its run row. */
  async function chainHolds(r: FactoryRun): Promise<boolean> {
    const { rows } = await sql<RunEventRow>`
      select ${sql.raw(RUN_EVENT_COLUMNS)} from run_event
      where tenant_id = ${r.tenantId} and run_id = ${r.runId} order by seq`.execute(t.db.system);
    const head = await sql<{ event_seq: number; event_hash: string }>`
      select event_seq, event_hash from run where tenant_id = ${r.tenantId} and run_id = ${r.runId}`.execute(
      t.db.system,
    );
    return (
      rows.length > 0 &&
      verifyChain(rows.map(chainedEvent)).ok &&
      head.rows[0]?.event_seq === rows.length &&
      head.rows[0]?.event_hash === rows[rows.length - 1].hash
    );
  }

  const count = async (table: string, tenant: string, runId: string) =>
    Number(
      (
        await sql<{ n: string }>`select count(*) as n from ${sql.table(table)}
          where tenant_id = ${tenant} and run_id = ${runId}::uuid`.execute(t.db.system)
      ).rows[0].n,
    );
  const runExists = async (r: FactoryRun) => (await count('run', r.tenantId, r.runId)) === 1;
  /** The days (yyyy-mm-dd) on which a tenant's artifact of these bytes is stored. */
  const artifactDays = async (tenant: string, body: string) =>
    (
      await sql<{ d: string }>`select created_on::text as d from artifact where tenant_id = ${tenant}
        and sha256 = ${createHash('sha256').update(body).digest('hex')} order by created_on`.execute(t.db.system)
    ).rows.map((r) => r.d);
  const artifactExists = async (tenant: string, body: string) => (await artifactDays(tenant, body)).length > 0;
  const partitionOf = async (r: FactoryRun) =>
    (
      await sql<{ p: string }>`select distinct tableoid::regclass::text as p from run_event
        where tenant_id = ${r.tenantId} and run_id = ${r.runId}`.execute(t.db.system)
    ).rows.map((x) => x.p);
  const tableExists = async (name: string) =>
    (await sql<{ r: string | null }>`select to_regclass(${'public.' + name})::text as r`.execute(t.db.system)).rows[0]
      .r !== null;

  const now = new Date();
  const jan = new Date(Date.UTC(2026, 0, 15, 12));
  const june2025 = new Date(Date.UTC(2025, 5, 10, 12));
  let expired: FactoryRun;
  let longRunning: FactoryRun;
  let recent: FactoryRun;
  let otherTenant: FactoryRun;
  let wholeMonth: FactoryRun;
  let pass: RetentionPass;

  beforeAll(async () => {
    t = await createTestDatabase();
    tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'ordo-retention-'));
    const db = t.db.system;
    await db
      .insertInto('tenant')
      .values([
        { id: 'ret-a', name: 'a' },
        { id: 'ret-b', name: 'b' },
        { id: 'ret-c', name: 'c' },
      ])
      .execute();
    await db
      .insertInto('plan')
      .values({ id: 'month', limits: JSON.stringify({ retentionDays: 30 }) })
      .execute();
    await db
      .insertInto('tenant_plan')
      .values([
        { tenant_id: 'ret-a', plan_id: 'month' },
        { tenant_id: 'ret-c', plan_id: 'month' },
      ])
      .execute();
    // ret-a's plan keeps 30 days; ret-b has no plan and the instance sets no retention.
    expired = await run('ret-a', jan, { logs: 'only the expired run logs this' });
    longRunning = await run('ret-a', jan, { status: 'running' });
    recent = await run('ret-a', new Date(now.getTime() - DAY), { logs: 'shared logs' });
    await run('ret-a', new Date(jan.getTime() + 60_000), { logs: 'shared logs' }).then((r) => (expiredShared = r));
    otherTenant = await run('ret-b', jan);
    wholeMonth = await run('ret-a', june2025);
    // A kept run whose attempt alone names an artifact an expired run's step names too.
    const attemptOnly = await run('ret-a', new Date(now.getTime() - DAY), { logs: 'named by a kept attempt only' });
    await sql`update step set logs_hash = null where tenant_id = 'ret-a' and run_id = ${attemptOnly.runId}::uuid`.execute(
      db,
    );
    await run('ret-a', new Date(jan.getTime() + 120_000), { logs: 'named by a kept attempt only' });
  });
  let expiredShared: FactoryRun;

  afterAll(async () => {
    fs.rmSync(tmp, { recursive: true, force: true });
    await t.drop();
  });

  it('makes month partitions for past months found in the default partition, moving their rows, and months ahead', async () => {
    // The test database was made this month: January's rows wait in the default partition.
    expect(await partitionOf(expired)).toEqual(['run_event_default']);
    const made = await repo.ensurePartitions(t.db.system, 3);
    expect(made).toEqual(expect.arrayContaining(['run_event_p2026_01', 'attempt_p2026_01', 'span_p2025_06']));
    expect(await partitionOf(expired)).toEqual(['run_event_p2026_01']);
    expect(await partitionOf(wholeMonth)).toEqual(['run_event_p2025_06']);
    // (Partitions grant nothing to the application roles: the owner reads them.)
    const owner = new pg.Client({ connectionString: t.ownerUrl });
    await owner.connect();
    try {
      const { rows } = await owner.query<{ n: number }>(`
        select ((select count(*) from run_event_default) + (select count(*) from attempt_default)
          + (select count(*) from span_default))::int as n`);
      expect(rows[0].n).toBe(0);
    } finally {
      await owner.end();
    }
    const ahead = new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth() + 3, 1));
    expect(
      await tableExists(`span_p${ahead.getUTCFullYear()}_${String(ahead.getUTCMonth() + 1).padStart(2, '0')}`),
    ).toBe(true);
    // A second call makes nothing.
    expect(await repo.ensurePartitions(t.db.system, 3)).toEqual([]);
    // The moved month keeps its parent's statistics targets.
    const stat = await sql<{ t: number }>`select attstattarget as t from pg_attribute
      where attrelid = 'public.run_event_p2026_01'::regclass and attname = 'data'`.execute(t.db.system);
    expect(stat.rows[0].t).toBe(0);
  });

  it('keeps a month a tenant still needs, drops a month only expired runs have rows in, and deletes the other expired runs in batches', async () => {
    pass = await service().pass(now);
    const june = pass.months.find((m) => m.month === '2025-06-01T00:00:00.000Z');
    expect(june).toMatchObject({
      dropped: true,
      partitions: ['run_event_p2025_06', 'attempt_p2025_06', 'span_p2025_06'],
      tenants: ['ret-a'],
    });
    expect(typeof june?.lockedMs).toBe('number');
    expect(await tableExists('run_event_p2025_06')).toBe(false);
    expect(await tableExists('attempt_p2025_06')).toBe(false);
    // January holds ret-a's running run and ret-b's runs (no retention): kept.
    const january = pass.months.find((m) => m.month === '2026-01-01T00:00:00.000Z');
    expect(january).toMatchObject({ dropped: false, heldBy: 'ret-a' });
    expect(await tableExists('run_event_p2026_01')).toBe(true);
    expect(pass.runsDeleted).toEqual({ 'ret-a': 4 });
  });

  it('removes exactly the expired finished runs of the tenant whose plan says so, with their rows', async () => {
    for (const r of [expired, expiredShared, wholeMonth]) {
      expect(await runExists(r)).toBe(false);
      for (const table of ['run_event', 'attempt', 'span', 'step'])
        expect([table, await count(table, r.tenantId, r.runId)]).toEqual([table, 0]);
    }
    for (const r of [longRunning, recent, otherTenant]) {
      expect(await runExists(r)).toBe(true);
      expect(await count('attempt', r.tenantId, r.runId)).toBe(1);
      expect(await chainHolds(r)).toBe(true);
    }
  });

  it('removes the artifacts no kept step names and keeps those a kept run still names', async () => {
    expect(await artifactExists('ret-a', 'only the expired run logs this')).toBe(false);
    expect(await artifactExists('ret-a', `logs of ${wholeMonth.runId}`)).toBe(false);
    expect(await artifactExists('ret-a', 'shared logs')).toBe(true);
    expect(await artifactExists('ret-a', 'named by a kept attempt only')).toBe(true);
    expect(pass.artifactsDeleted).toEqual({ 'ret-a': 2 });
    expect(await artifactExists('ret-b', `logs of ${otherTenant.runId}`)).toBe(true);
  });

  it('records every removal in retention_log', async () => {
    const { rows } = await sql<{ tenant_id: string; action: string; detail: Record<string, unknown> }>`
      select tenant_id, action, detail from retention_log order by id`.execute(t.db.system);
    expect(rows).toEqual([
      expect.objectContaining({ tenant_id: 'ret-a', action: 'partition_dropped' }),
      expect.objectContaining({
        tenant_id: 'ret-a',
        action: 'runs_deleted',
        detail: expect.objectContaining({
          runs: 4,
          steps: 4,
          events: 9,
          attempts: 3,
          spans: 3,
        }) as unknown,
      }),
      // The four hashes the deleted runs' steps and attempts named, two of them still named.
      { tenant_id: 'ret-a', action: 'artifacts_deleted', detail: { artifacts: 2, candidates: 4 } },
    ]);
  });

  it('leaves a row of the last two days to a writer that found it, and keeps its candidate for a later pass', async () => {
    const body = 'logs stored again today';
    const hash = createHash('sha256').update(body).digest('hex');
    const today = now.toISOString().slice(0, 10);
    // An expired run named the bytes in January; today a kept run's step stored them again and
    // has not named them yet (its step's result is being written).
    const old = await run('ret-a', jan, { logs: body });
    const kept = await run('ret-a', now, { logs: body });
    await sql`update step set logs_hash = null where tenant_id = 'ret-a' and run_id = ${kept.runId}::uuid`.execute(
      t.db.system,
    );
    await sql`update attempt set logs_hash = null where tenant_id = 'ret-a' and run_id = ${kept.runId}::uuid`.execute(
      t.db.system,
    );
    expect(await artifactDays('ret-a', body)).toEqual(['2026-01-15', today]);
    const policy = { tenantId: 'ret-a', cutoff: new Date(now.getTime() - 30 * DAY), requiresExport: false };
    expect(await repo.purge(t.db.system, policy, 100)).toBe(1);
    expect(await runExists(old)).toBe(false);

    // The writer's transaction: its artifact insert finds today's row and locks nothing, then its
    // step names the hash. The sweep runs on another connection before that commits.
    let swept = -1;
    await t.db.system.transaction().execute(async (tx) => {
      await sql`insert into artifact (tenant_id, sha256, media_type, size, body_bytes)
        values ('ret-a', ${hash}, 'text/plain', ${Buffer.byteLength(body)}, ${Buffer.from(body)})
        on conflict do nothing`.execute(tx);
      await sql`update step set logs_hash = ${hash} where tenant_id = 'ret-a' and run_id = ${kept.runId}::uuid`.execute(
        tx,
      );
      swept = await repo.sweepArtifacts(t.db.system, 'ret-a');
    });
    // January's row went; today's, which the committed step now names, stayed.
    expect(swept).toBe(1);
    expect(await artifactDays('ret-a', body)).toEqual([today]);
    const candidates = async () =>
      (
        await sql<{ h: string }>`select sha256 as h from artifact_candidate where tenant_id = 'ret-a'`.execute(
          t.db.system,
        )
      ).rows.map((r) => r.h);
    // The hash was unnamed when the sweep looked and has a recent row: noted again, and the next
    // pass, which finds it named, lets it go and deletes nothing.
    expect(await candidates()).toEqual([hash]);
    expect(await repo.sweepArtifacts(t.db.system, 'ret-a')).toBe(0);
    expect(await candidates()).toEqual([]);
    expect(await artifactDays('ret-a', body)).toEqual([today]);
  });

  it('holds back a run no export read after it ended when retention requires an export, and removes it once one did', async () => {
    const c = await run('ret-c', jan);
    const policy = { tenantId: 'ret-c', cutoff: new Date(now.getTime() - 30 * DAY), requiresExport: true };
    expect(await repo.purge(t.db.system, policy, 100)).toBe(0);
    // An export that started before the run ended does not count.
    await t.db.withTenant('ret-c', (tx) =>
      new ExportRepository().recordExport(tx, new Date(jan.getTime() + 1000), {}, 1),
    );
    // Nor one of another DAG.
    await t.db.withTenant('ret-c', (tx) => new ExportRepository().recordExport(tx, now, { dagId: 'other' }, 0));
    expect(await repo.purge(t.db.system, policy, 100)).toBe(0);
    expect(await runExists(c)).toBe(true);
    // The export path records a complete export.
    const keys = await SigningKeys.open(path.join(tmp, 'keys'), { create: true });
    const exporter = new ExportService(
      t.db,
      new ExportRepository(),
      keys,
      new QuotaChecks(t.db, new PlansRepository(), new TenantLimits(t.db)),
    );
    const it = exporter.lines('ret-c', { to: new Date(Date.UTC(2026, 1, 1)) });
    for (let r = await it.next(); !r.done; r = await it.next());
    expect(await repo.purge(t.db.system, policy, 100)).toBe(1);
    expect(await runExists(c)).toBe(false);
  });

  it('deletes nothing of a tenant with no retention, and falls back to ORDO_RETENTION_DAYS without a plan setting', async () => {
    const before = await service().policies(now);
    expect(before.map((p) => p.tenantId)).toEqual(['ret-a', 'ret-c']);
    const withDefault = await service(false, 3650).policies(now);
    expect(withDefault.map((p) => [p.tenantId, Math.round((now.getTime() - p.cutoff.getTime()) / DAY)])).toEqual([
      ['ret-a', 30],
      ['ret-b', 3650],
      ['ret-c', 30],
    ]);
    await service(false, 3650).pass(now);
    expect(await runExists(otherTenant)).toBe(true);
  });

  it('refuses DELETE of events outside retention: the system role has no grant, the owner meets the trigger', async () => {
    await expect(sql`delete from run_event where tenant_id = 'ret-b'`.execute(t.db.system)).rejects.toThrow(
      /permission denied/,
    );
    const owner = new pg.Client({ connectionString: t.ownerUrl });
    await owner.connect();
    try {
      await expect(owner.query(`delete from run_event where tenant_id = 'ret-b'`)).rejects.toThrow(/append-only/);
    } finally {
      await owner.end();
    }
    expect(await chainHolds(otherTenant)).toBe(true);
  });

  it('catches up without waiting the interval when a tenant has more expired runs than a pass deletes', async () => {
    const db = t.db.system;
    await db.insertInto('tenant').values({ id: 'ret-d', name: 'd' }).execute();
    await db.insertInto('tenant_plan').values({ tenant_id: 'ret-d', plan_id: 'month' }).execute();
    const perPass = MAX_BATCHES_PER_TENANT * RETENTION_BATCH;
    const expire = (from: number) =>
      sql`insert into run (tenant_id, run_id, dag_id, dag_version, content_hash, run_token, inputs, inputs_hash, status,
          trace_id, requested_by, created_at, started_at, finished_at, steps_total, steps_remaining)
        select 'ret-d', gen_random_uuid(), 'd', 1, repeat('c', 64), 'tok-d-' || g, '{}', repeat('a', 64), 'succeeded',
          md5('d' || g), 'test', ${jan}, ${jan}, ${new Date(jan.getTime() + 5000)}, 1, 0
        from generate_series(${from}::int, ${from + perPass}::int) g`.execute(db);
    const left = async () =>
      Number((await sql<{ n: string }>`select count(*) as n from run where tenant_id = 'ret-d'`.execute(db)).rows[0].n);
    await expire(0);
    const first = await service().pass(now);
    expect(first.runsDeleted['ret-d']).toBe(perPass);
    expect(first.backlog).toEqual(['ret-d']);
    expect(await left()).toBe(1);
    const second = await service().pass(now);
    expect([second.runsDeleted['ret-d'], second.backlog]).toEqual([1, []]);

    // The scheduler's job: its pass at start leaves one run, the next comes a second later, not an hour.
    await expire(perPass + 1);
    const scheduled = service(false, undefined, ['scheduler']);
    scheduled.onApplicationBootstrap();
    try {
      const until = Date.now() + 30_000;
      while ((await left()) > 0 && Date.now() < until) await new Promise((r) => setTimeout(r, 200));
      expect(await left()).toBe(0);
    } finally {
      await scheduled.onApplicationShutdown();
    }
  });
});
