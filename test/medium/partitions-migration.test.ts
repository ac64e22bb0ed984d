import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { applicationUrls, listMigrations, migrate } from '../../src/core/database/migrator';
import { createEmptyDatabase } from '../support/empty-database';

const RUN = '22222222-2222-4222-8222-222222222222';

describe('migration 022: an install with data moves to month partitions', () => {
  let db: { url: string; drop(): Promise<void> };
  let owner: pg.Client;
  let dir: string;
  let before: {
    events: Record<string, unknown>[];
    attempts: Record<string, unknown>[];
    spans: Record<string, unknown>[];
  };

  const rows = async (q: string) => (await owner.query<Record<string, unknown>>(q)).rows;

  beforeAll(async () => {
    db = await createEmptyDatabase();
    // The schema as it was before 022: every migration before it, with today's function files.
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ordo-migrations-'));
    for (const m of listMigrations().filter((x) => x.name < '022_')) fs.writeFileSync(path.join(dir, m.name), m.sql);
    await migrate(db.url, { dir });
    owner = new pg.Client({ connectionString: db.url });
    await owner.connect();
    await owner.query(`insert into tenant (id, name) values ('mig', 'M')`);
    await owner.query(`insert into run (tenant_id, run_id, dag_id, dag_version, content_hash, run_token, inputs, inputs_hash,
        trace_id, requested_by, steps_total, steps_remaining, status, created_at, started_at, finished_at)
      values ('mig', '${RUN}', 'd', 1, 'h', 'tok', '{}', repeat('a', 64), repeat('b', 32), 'me', 1, 0, 'succeeded',
        '2026-03-31 23:59:59Z', '2026-03-31 23:59:59Z', '2026-04-01 00:00:05Z')`);
    // Events on both sides of a month's end, with the hash chain as stored.
    await owner.query(`insert into run_event (tenant_id, run_id, seq, created_at, type, actor, data, prev_hash, hash)
      select 'mig', '${RUN}', i, timestamptz '2026-03-31 23:59:58Z' + make_interval(secs => (i - 1) * 2), 'e' || i, 'me', '{}',
        case when i = 1 then '' else repeat(to_hex(i - 1), 64 / length(to_hex(i - 1))) end,
        repeat(to_hex(i), 64 / length(to_hex(i)))
      from generate_series(1, 4) i`);
    await owner.query(`insert into attempt (tenant_id, run_id, step_id, attempt, created_at, epoch, worker_id, status,
        lease_expires_at, traceparent, claimed_at)
      values ('mig', '${RUN}', 's', 1, '2026-03-31 23:59:59Z', 1, 'w', 'succeeded', now(), 'tp', now())`);
    await owner.query(`insert into span (tenant_id, trace_id, span_id, started_at, name, kind, run_id, ended_at,
        status_code, attributes)
      values ('mig', repeat('b', 32), repeat('c', 16), '2026-04-01 00:00:01Z', 'orchestrator.plugin', 0, '${RUN}',
        '2026-04-01 00:00:02Z', 1, '{}')`);
    before = {
      events: await rows(`select * from run_event order by seq`),
      attempts: await rows(`select * from attempt`),
      spans: await rows(`select * from span`),
    };
    await migrate(db.url);
  });

  afterAll(async () => {
    await owner?.end();
    await db?.drop();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('keeps every row as it was, each in its month partition, the default partitions empty', async () => {
    expect(await rows(`select * from run_event order by seq`)).toEqual(before.events);
    expect(await rows(`select * from attempt`)).toEqual(before.attempts);
    expect(await rows(`select * from span`)).toEqual(before.spans);
    expect(
      await rows(`select tableoid::regclass::text as p, count(*)::int as n from run_event group by 1 order by 1`),
    ).toEqual([
      { p: 'run_event_p2026_03', n: 1 },
      { p: 'run_event_p2026_04', n: 3 },
    ]);
    expect(await rows(`select tableoid::regclass::text as p from attempt`)).toEqual([{ p: 'attempt_p2026_03' }]);
    expect(await rows(`select tableoid::regclass::text as p from span`)).toEqual([{ p: 'span_p2026_04' }]);
    expect(
      await rows(`select (select count(*) from run_event_default) + (select count(*) from attempt_default)
        + (select count(*) from span_default) as n`),
    ).toEqual([{ n: '0' }]);
  });

  it('partitions the three tables by range on their time column, with row-level security forced on each parent', async () => {
    expect(
      await rows(`select c.relname as t, pg_get_partkeydef(c.oid) as key, c.relrowsecurity as rls, c.relforcerowsecurity as forced
        from pg_class c where c.relname in ('run_event', 'attempt', 'span') order by 1`),
    ).toEqual([
      { t: 'attempt', key: 'RANGE (created_at)', rls: true, forced: true },
      { t: 'run_event', key: 'RANGE (created_at)', rls: true, forced: true },
      { t: 'span', key: 'RANGE (started_at)', rls: true, forced: true },
    ]);
  });

  it('keeps the triggers: events stay append-only, attempts refuse an illegal transition, new events announce themselves', async () => {
    await expect(owner.query(`update run_event set actor = 'x'`)).rejects.toThrow(/append-only/);
    await expect(owner.query(`delete from run_event`)).rejects.toThrow(/append-only/);
    await expect(owner.query(`update attempt set status = 'running'`)).rejects.toThrow(/illegal attempt transition/);
    await owner.query('listen ordo_run_event');
    const heard = new Promise<string>((resolve) => owner.once('notification', (n) => resolve(n.payload ?? '')));
    await owner.query(`insert into run_event (tenant_id, run_id, seq, created_at, type, actor, data, prev_hash, hash)
      values ('mig', '${RUN}', 5, now(), 'e5', 'me', '{}', repeat('4', 64), repeat('5', 64))`);
    const maxBefore = Math.max(...before.events.map((e) => Number(e.stream_id)));
    expect(await heard).toMatch(/^mig /);
    const [{ stream_id }] = await rows(`select stream_id from run_event where seq = 5`);
    expect(Number(stream_id)).toBeGreaterThan(maxBefore);
  });

  it('shows a tenant its own rows only, through the parents, to the application role', async () => {
    const app = new pg.Client({ connectionString: applicationUrls(db.url).appUrl });
    await app.connect();
    try {
      await app.query('begin');
      await app.query(`select set_config('app.tenant_id', 'other', true)`);
      expect((await app.query(`select count(*)::int as n from run_event`)).rows[0].n).toBe(0);
      await app.query(`select set_config('app.tenant_id', 'mig', true)`);
      expect((await app.query(`select count(*)::int as n from run_event`)).rows[0].n).toBe(5);
      await app.query('rollback');
      await expect(app.query(`select count(*) from run_event_p2026_03`)).rejects.toThrow(/permission denied/);
    } finally {
      await app.end();
    }
  });
});
