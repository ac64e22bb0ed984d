import pg from 'pg';
import { createTestDatabase, type TestDatabase } from '../support/test-database';

/**
 * The notifications an engine function keeps for after its commit (ordo_notify while
 * ordo.notify_after_commit is on, ordo_take_notifications at its end; migrations 020 and 033):
 * each returned once, in order of first mention, payloads exactly as given, and sent at once again
 * after they were taken.
 */
describe('notifications kept for after the commit', () => {
  let t: TestDatabase;
  let client: pg.PoolClient;

  beforeAll(async () => {
    t = await createTestDatabase();
    client = await t.db.systemPool.connect();
  });
  afterAll(async () => {
    client.release();
    await t.drop();
  });

  /** Runs `notes` through ordo_notify in one collecting transaction and returns what ordo_take_notifications gives. */
  async function collect(notes: [string, string][]): Promise<unknown[]> {
    await client.query('begin');
    try {
      await client.query(`select set_config('ordo.notify_after_commit', 'on', true)`);
      await client.query(
        `select ordo_notify(n->>0, n->>1) from jsonb_array_elements($1::jsonb) with ordinality x(n, k) order by k`,
        [JSON.stringify(notes)],
      );
      return (await client.query<{ n: unknown }>('select n from ordo_take_notifications() n')).rows.map((r) => r.n);
    } finally {
      await client.query('rollback');
    }
  }

  it('returns each notification once, in order of first mention', async () => {
    expect(
      await collect([
        ['ordo_ready', 'b'],
        ['ordo_run_finished', 'r1'],
        ['ordo_ready', 'a'],
        ['ordo_ready', 'b'],
        ['ordo_run_finished', 'r2'],
        ['ordo_run_finished', 'r1'],
      ]),
    ).toEqual([
      ['ordo_ready', 'b'],
      ['ordo_run_finished', 'r1'],
      ['ordo_ready', 'a'],
      ['ordo_run_finished', 'r2'],
    ]);
  });

  it('keeps payloads exactly: commas, brackets, quotes, backslashes, non-ASCII and empty', async () => {
    const payloads = ['a,b', '],[', '"quoted"', 'back\\slash', 'naïve ✓', '', '{"x": [1, 2]}'];
    expect(await collect(payloads.map((p) => ['ordo_run_event', p]))).toEqual(
      payloads.map((p) => ['ordo_run_event', p]),
    );
  });

  it('returns nothing when nothing was kept', async () => {
    expect(await collect([])).toEqual([]);
  });

  it('keeps hundreds in one transaction (a hop that ends many runs)', async () => {
    const ids = Array.from({ length: 600 }, (_, i) => `run-${String(i).padStart(4, '0')}`);
    const got = await collect(ids.map((id) => ['ordo_run_finished', id]));
    expect(got).toHaveLength(600);
    expect(got).toEqual(ids.map((id) => ['ordo_run_finished', id]));
  });

  it('sends at once after the kept ones were taken, and nothing kept is sent by the commit', async () => {
    const listener = new pg.Client({ connectionString: t.systemUrl });
    await listener.connect();
    const heard: string[] = [];
    listener.on('notification', (n) => heard.push(`${n.channel} ${n.payload}`));
    try {
      await listener.query('listen ordo_test_collect');
      await client.query('begin');
      await client.query(`select set_config('ordo.notify_after_commit', 'on', true)`);
      await client.query(`select ordo_notify('ordo_test_collect', 'kept')`);
      const kept = (await client.query<{ n: unknown }>('select n from ordo_take_notifications() n')).rows.map(
        (r) => r.n,
      );
      await client.query(`select ordo_notify('ordo_test_collect', 'sent')`);
      await client.query('commit');
      expect(kept).toEqual([['ordo_test_collect', 'kept']]);
      for (let i = 0; i < 100 && heard.length === 0; i++) await new Promise((r) => setTimeout(r, 10));
      await new Promise((r) => setTimeout(r, 50));
      expect(heard).toEqual(['ordo_test_collect sent']);
    } finally {
      await listener.end();
    }
  });
});
