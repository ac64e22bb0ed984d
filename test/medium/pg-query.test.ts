import pg from 'pg';
import { Database, throughPooler } from '../../src/core/database/database';
import { createTestDatabase, type TestDatabase } from '../support/test-database';

/**
 * The pools' connections make promise-returning queries through pg's callback form
 * (src/core/database/pg-query.ts): the caller sees what pg's promise form gives, results and
 * errors alike, and callbacks and query objects reach pg unchanged.
 */
describe('pool connections: promise queries through the callback form', () => {
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

  it('is installed on the pool connections', () => {
    expect(client.query).not.toBe(pg.Client.prototype.query);
  });

  it('resolves with pg result: rows, fields, command and row count', async () => {
    const r = await client.query<{ x: number; s: string }>('select $1::int as x, $2::text as s', [7, 'seven']);
    expect(r.rows).toEqual([{ x: 7, s: 'seven' }]);
    expect(r.fields.map((f) => f.name)).toEqual(['x', 's']);
    expect(r.command).toBe('SELECT');
    expect(r.rowCount).toBe(1);
    const noValues = await client.query('select 1 as one');
    expect(noValues.rows).toEqual([{ one: 1 }]);
  });

  it('runs named statements given as a config object', async () => {
    const q = { name: 'ordo_pgq_test', text: 'select $1::int * 2 as doubled', values: [21] };
    expect((await client.query(q)).rows).toEqual([{ doubled: 42 }]);
    expect((await client.query({ ...q, values: [5] })).rows).toEqual([{ doubled: 10 }]);
  });

  it('rejects with the server error and its SQLSTATE, and the connection stays usable', async () => {
    await expect(client.query('select 1 / $1::int', [0])).rejects.toMatchObject({ code: '22012' });
    await expect(client.query('select * from no_such_table')).rejects.toMatchObject({ code: '42P01' });
    expect((await client.query('select 2 as two')).rows).toEqual([{ two: 2 }]);
  });

  it('passes a callback to pg as given', async () => {
    const rows = await new Promise<unknown[]>((resolve, reject) => {
      void client.query('select $1::text as v', ['cb'], (err, res) => (err ? reject(err) : resolve(res.rows)));
    });
    expect(rows).toEqual([{ v: 'cb' }]);
  });

  it('passes a query object to pg as given (it reports through its own events)', async () => {
    const q = client.query(new pg.Query('select g from generate_series(1, 3) g'));
    const rows: unknown[] = [];
    q.on('row', (row: unknown) => rows.push(row));
    await new Promise<void>((resolve, reject) => {
      q.on('end', () => resolve());
      q.on('error', reject);
    });
    expect(rows).toEqual([{ g: 1 }, { g: 2 }, { g: 3 }]);
  });

  it('keeps a failed transaction failed until rollback, as Kysely relies on', async () => {
    await client.query('begin');
    await expect(client.query('select 1 / 0')).rejects.toMatchObject({ code: '22012' });
    await expect(client.query('select 1')).rejects.toMatchObject({ code: '25P02' });
    await client.query('rollback');
    expect((await client.query('select 3 as three')).rows).toEqual([{ three: 3 }]);
  });
});

describe('pool connections without named statements (ORDO_DB_PREPARED_STATEMENTS off, a pooler)', () => {
  let t: TestDatabase;
  let unnamed: Database;

  beforeAll(async () => {
    t = await createTestDatabase();
    unnamed = new Database(
      { app: t.appUrl, system: t.systemUrl },
      { poolSize: 2, applicationName: 'ordo:test', preparedStatements: false },
    );
  });
  afterAll(async () => {
    await unnamed.close();
    await t.drop();
  });

  it('sends a named statement unnamed: same results, nothing prepared on the session', async () => {
    const named = async (db: Database) => {
      const client = await db.systemPool.connect();
      try {
        const q = { name: 'ordo_pgq_unnamed', text: 'select $1::int * 2 as doubled', values: [21] };
        const results = [(await client.query(q)).rows, (await client.query({ ...q, values: [5] })).rows];
        const prepared = await client.query<{ name: string }>('select name from pg_prepared_statements');
        return { results, prepared: prepared.rows.map((r) => r.name) };
      } finally {
        client.release();
      }
    };
    expect(unnamed.preparedStatements).toBe(false);
    expect(await named(unnamed)).toEqual({ results: [[{ doubled: 42 }], [{ doubled: 10 }]], prepared: [] });
    // The default: the name reaches PostgreSQL.
    expect(t.db.preparedStatements).toBe(true);
    expect(await named(t.db)).toEqual({
      results: [[{ doubled: 42 }], [{ doubled: 10 }]],
      prepared: ['ordo_pgq_unnamed'],
    });
  });

  it('goes through a pooler with its address, database and parameters and the role credentials', async () => {
    expect(
      throughPooler(
        'postgres://ordo_app:s%3Acret@db.internal:5432/ordo',
        'postgres://pgb:6432/ordo_pooled?sslmode=require',
      ),
    ).toBe('postgres://ordo_app:s%3Acret@pgb:6432/ordo_pooled?sslmode=require');
    expect(throughPooler('postgres://ordo_app:x@db.internal:5432/ordo', 'postgres://pgb:6432')).toBe(
      'postgres://ordo_app:x@pgb:6432/ordo',
    );
    const pooled = new Database(
      { app: t.appUrl, system: t.systemUrl, pooler: 'postgres://127.0.0.1:1/x' },
      { poolSize: 2, applicationName: 'ordo:test' },
    );
    expect(pooled.preparedStatements).toBe(false);
    await pooled.close();
  });
});
