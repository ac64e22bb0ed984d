import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { ArtifactsRepository } from '../../src/modules/artifacts/artifacts.repository';
import { EngineRepository } from '../../src/modules/engine/engine.repository';
import { EngineStore } from '../../src/modules/engine/engine.store';
import { LeaseKeeper } from '../../src/modules/engine/lease-keeper';
import { ReaperService } from '../../src/modules/engine/reaper.service';
import { AuditExportService } from '../../src/modules/export/audit-export.service';
import { ExportService } from '../../src/modules/export/export.service';
import { startTestApp, type TestApp } from '../support/test-app';
import { chainDag, publishDag } from './runs-support';

/**
 * The series the alerts in deploy/prometheus/ordo-alerts.yml watch (docs/alerts.md), each made to
 * move by the event it counts, against the app's real database, and read back from GET /metrics.
 */
describe('/metrics: the series behind the alerts', () => {
  let app: TestApp;
  let owner: pg.Client;
  let store: EngineStore;
  const WORKER = 'alert-metrics-worker';
  const claimOpts = { workerId: WORKER, capacity: 1, leaseMs: 60_000, tenantCap: 64 };

  beforeAll(async () => {
    app = await startTestApp();
    owner = new pg.Client({ connectionString: app.testDb.ownerUrl });
    await owner.connect();
    store = new EngineStore(app.ordo.database, new EngineRepository(), new ArtifactsRepository());
  });
  afterAll(async () => {
    await owner.end();
    await app.close();
  });

  /** The scrape as a map from series (name and labels, as exposed) to value. */
  async function scrape(): Promise<Map<string, number>> {
    const r = await app.request('GET', '/metrics', { as: { token: app.platformToken } });
    expect(r.status).toBe(200);
    const series = new Map<string, number>();
    for (const line of r.text.split('\n')) {
      const m = /^([a-z_:][\w:]*(?:\{[^}]*\})?) (\S+)$/.exec(line);
      if (m) series.set(m[1], Number(m[2]));
    }
    return series;
  }

  /** Starts a one-step run in a new tenant and claims its step as WORKER. */
  async function claimedStep(tenant: string) {
    const t = await app.tenant(tenant);
    await publishDag(app, t.tenantId, chainDag('one', 1));
    const created = await app.request('POST', '/api/v1/runs', {
      as: { token: t.token, tenantId: t.tenantId },
      body: { dagId: 'one', inputs: {}, runToken: 'r1' },
    });
    expect(created.status).toBe(201);
    const [w] = await store.cycle([], claimOpts);
    expect(w).toMatchObject({ tenantId: t.tenantId, runId: created.body.runId, stepId: 's01' });
    return w;
  }

  const lost = 'orchestrator_lease_renewal_failures_total{reason="lost"}';
  const failed = 'orchestrator_lease_renewal_failures_total{reason="error"}';
  const orphaned = 'orchestrator_steps_orphaned_total';
  const lastPass = 'orchestrator_reaper_last_success_timestamp_seconds';

  it('counts the attempts the reaper orphans, its completed pass, and the lease the worker then fails to renew', async () => {
    const w = await claimedStep('alerts-orphan');
    const keeper = (held: { tenantId: string; runId: string; stepId: string; epoch: number }[]) => {
      const gone: Set<string>[] = [];
      const k = new LeaseKeeper({
        heartbeat: (items) => store.heartbeat(WORKER, items, 60_000),
        held: () => held,
        lost: (keys) => gone.push(keys),
        intervalMs: 60_000,
        log: { warn: () => undefined },
      });
      return { k, gone };
    };
    const before = await scrape();
    expect(before.get(lost)).toBeDefined();
    expect(before.get(failed)).toBeDefined();

    // A heartbeat of a live lease renews it: nothing counted.
    const live = keeper([w]);
    await live.k.beat();
    expect(live.gone).toEqual([]);
    const renewed = await scrape();
    expect([renewed.get(lost), renewed.get(failed)]).toEqual([before.get(lost), before.get(failed)]);

    // The worker stops heartbeating; its lease expires and a reaper pass orphans the attempt.
    await owner.query(`update queue_item set lease_expires_at = now() - interval '1 second' where run_id = $1`, [
      w.runId,
    ]);
    const passStarted = Date.now() / 1000;
    const reaper = new ReaperService(app.config, store);
    await reaper.sweep();
    const reaped = await scrape();
    expect(reaped.get(orphaned)).toBe((before.get(orphaned) ?? 0) + 1);
    expect(reaped.get(lastPass)).toBeGreaterThanOrEqual(Math.floor(passStarted));
    expect(reaped.get(lastPass)).toBeLessThanOrEqual(Date.now() / 1000);
    const attempts = await owner.query<{ status: string }>(`select status from attempt where run_id = $1`, [w.runId]);
    expect(attempts.rows.map((a) => a.status)).toEqual(['orphaned']);

    // The worker's next heartbeat finds the lease gone: one lost lease.
    const late = keeper([w]);
    await late.k.beat();
    expect(late.gone).toHaveLength(1);
    const afterLost = await scrape();
    expect(afterLost.get(lost)).toBe((before.get(lost) ?? 0) + 1);
    expect(afterLost.get(failed)).toBe(before.get(failed));

    // A heartbeat statement that fails (the database refuses it) counts every lease it carried.
    const broken = keeper([
      { ...w, runId: 'not-a-uuid' },
      { ...w, runId: 'not-a-uuid-either' },
    ]);
    await broken.k.beat();
    const afterError = await scrape();
    expect(afterError.get(failed)).toBe((before.get(failed) ?? 0) + 2);
    expect(afterError.get(lost)).toBe(afterLost.get(lost));
  });

  it('counts an export that fails on the server, not one refused for its input or one that succeeds', async () => {
    const t = await app.tenant('alerts-export');
    const as = { token: t.token, tenantId: t.tenantId };
    const runs = 'orchestrator_export_failures_total{export="runs"}';
    const audit = 'orchestrator_export_failures_total{export="audit"}';
    const before = await scrape();
    expect([before.get(runs), before.get(audit)]).toEqual([expect.any(Number), expect.any(Number)]);

    expect((await app.request('GET', '/api/v1/export', { as })).status).toBe(200);
    const bad = await app.request('GET', '/api/v1/export?from=yesterday', { as });
    expect([bad.status, bad.body.error.code]).toEqual([400, 'INVALID_RANGE']);
    const auditLines = app.ordo.app.get(AuditExportService, { strict: false }).lines({ fromSeq: 5, toSeq: 1 });
    await expect(auditLines.next()).rejects.toMatchObject({ code: 'INVALID_RANGE' });
    const refused = await scrape();
    expect([refused.get(runs), refused.get(audit)]).toEqual([before.get(runs), before.get(audit)]);

    // A range PostgreSQL cannot read (an invalid timestamp) fails the export in the database.
    const lines = app.ordo.app.get(ExportService, { strict: false }).lines(t.tenantId, { from: new Date(NaN) });
    await expect(lines.next()).rejects.toThrow(/timestamp|date|time/i);
    const failedExport = await scrape();
    expect(failedExport.get(runs)).toBe((before.get(runs) ?? 0) + 1);
    expect(failedExport.get(audit)).toBe(before.get(audit));
  });

  it('reports the readiness check at every scrape: 0 while a function file is not applied, 1 again once it is', async () => {
    const ready = 'orchestrator_database_ready';
    expect((await scrape()).get(ready)).toBe(1);
    const { rows } = await owner.query<{ name: string }>(`select min(name) as name from ordo_function`);
    const name = rows[0].name;
    await owner.query(`update ordo_function set checksum = checksum || '-stale' where name = $1`, [name]);
    try {
      const stale = await scrape();
      expect(stale.get(ready)).toBe(0);
      const probe = await app.request('GET', '/readyz');
      expect([probe.status, probe.body.checks.migrations]).toEqual([503, `pending: ${name}.sql`]);
    } finally {
      await owner.query(
        `update ordo_function set checksum = left(checksum, length(checksum) - length('-stale')) where name = $1`,
        [name],
      );
    }
    expect((await scrape()).get(ready)).toBe(1);
    expect((await app.request('GET', '/readyz')).status).toBe(200);
  });

  it('still serves the process metrics, without the queue gauges, when the database readings fail', async () => {
    const t = await app.tenant('alerts-readings');
    await app.ordo.database.system
      .insertInto('queue_item')
      .values({ tenant_id: t.tenantId, run_id: randomUUID(), step_id: 'a' })
      .execute();
    const depth = `orchestrator_queue_depth{tenant="${t.tenantId}"}`;
    expect((await scrape()).get(depth)).toBe(1);
    const role = new URL(app.testDb.systemUrl).username;
    await owner.query(`revoke select on queue_item from ${role}`);
    try {
      const { rows } = await owner.query<{ can: boolean }>(
        `select has_table_privilege($1, 'queue_item', 'select') as can`,
        [role],
      );
      expect(rows[0].can).toBe(false);
      const s = await scrape();
      expect([...s.keys()].filter((k) => k.startsWith('orchestrator_queue_depth'))).toEqual([]);
      expect(s.get('orchestrator_database_ready')).toBe(1);
      expect(s.get('ordo_process_resident_memory_bytes')).toBeGreaterThan(0);
    } finally {
      await owner.query(`grant select on queue_item to ${role}`);
    }
    expect((await scrape()).get(depth)).toBe(1);
  });
});
