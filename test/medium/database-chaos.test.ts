import { sql } from 'kysely';
import { loadConfig } from '../../src/core/config/config';
import { Database } from '../../src/core/database/database';
import { createTestDatabase, type TestDatabase } from '../support/test-database';

/**
 * The test-only switch ORDO_CHAOS_COMMIT_ERROR_RATE reaches the pools through DatabaseOptions: a
 * committed transaction is reported to the caller as a lost connection, and its write stays.
 */
describe('commit error injection (test-only)', () => {
  let t: TestDatabase;
  const opened: Database[] = [];

  const open = (rate: string): Database => {
    const config = loadConfig({ ORDO_CHAOS_COMMIT_ERROR_RATE: rate });
    const db = new Database(
      { app: t.appUrl, system: t.systemUrl },
      { poolSize: 2, applicationName: 'ordo:test-chaos', chaosCommitErrorRate: config.ORDO_CHAOS_COMMIT_ERROR_RATE },
    );
    opened.push(db);
    return db;
  };

  beforeAll(async () => {
    t = await createTestDatabase();
  });
  afterAll(async () => {
    await Promise.all(opened.map((d) => d.close()));
    await t.drop();
  });

  it('reports every committed transaction as a lost connection at rate 1, after the commit', async () => {
    const db = open('1');
    await expect(
      db.withSystem((tx) => sql`insert into tenant (id, name) values ('chaos-probe', 'chaos probe')`.execute(tx)),
    ).rejects.toMatchObject({ code: 'ORDO_CHAOS_COMMIT_ERROR' });
    const r = await sql<{ n: number }>`select count(*)::int as n from tenant where id = 'chaos-probe'`.execute(
      t.db.system,
    );
    expect(r.rows).toEqual([{ n: 1 }]);
  });

  it('injects nothing when unset', async () => {
    const db = open('');
    const write = db.withSystem((tx) =>
      sql`insert into tenant (id, name) values ('chaos-none', 'no chaos')`.execute(tx),
    );
    await expect(write).resolves.toMatchObject({ numAffectedRows: 1n });
  });
});
