import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { APP_ROLE, listMigrations, migrate, pendingMigrations } from '../../src/core/database/migrator';

/** An empty database on the test server (no template), dropped by the returned function. */
async function emptyDatabase(): Promise<{ url: string; drop(): Promise<void> }> {
  const server = process.env.ORDO_TEST_SERVER_URL!;
  const name = `ordo_t_${process.env.ORDO_TEST_TEMPLATE!.replace('ordo_tpl_', '')}_m${randomBytes(4).toString('hex')}`;
  const admin = new pg.Client({ connectionString: server });
  await admin.connect();
  await admin.query(`create database ${name}`);
  await admin.end();
  const u = new URL(server);
  u.pathname = `/${name}`;
  return {
    url: u.toString(),
    async drop() {
      const c = new pg.Client({ connectionString: server });
      await c.connect();
      await c.query(`drop database if exists ${name} with (force)`).finally(() => c.end());
    },
  };
}

async function query<T extends pg.QueryResultRow>(url: string, sql: string, params: unknown[] = []): Promise<T[]> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    return (await c.query<T>(sql, params)).rows;
  } finally {
    await c.end();
  }
}

describe('migrator', () => {
  const dirs: string[] = [];
  const migrationsDir = (files: Record<string, string>) => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ordo-migrations-'));
    dirs.push(dir);
    for (const [name, sql] of Object.entries(files)) fs.writeFileSync(path.join(dir, name), sql);
    return dir;
  };
  afterAll(() => dirs.forEach((d) => fs.rmSync(d, { recursive: true, force: true })));

  it('applies every migration once, then nothing on the next run, and reports none pending', async () => {
    const db = await emptyDatabase();
    try {
      const first = await migrate(db.url);
      expect(first.applied).toEqual(listMigrations().map((m) => m.name));
      const second = await migrate(db.url);
      expect(second.applied).toEqual([]);
      const c = new pg.Client({ connectionString: db.url });
      await c.connect();
      expect(await pendingMigrations((q) => c.query(q))).toEqual([]);
      await c.end();
      const gw = await query<{ n: number }>(
        db.url,
        `select count(*)::int as n from information_schema.schemata where schema_name = 'graphile_worker'`,
      );
      expect(gw[0].n).toBe(1);
      // The app role can connect with the derived credentials and is bound by RLS.
      const app = await query<{ u: string; bypass: boolean }>(
        first.appUrl,
        `select current_user as u, (select rolbypassrls from pg_roles where rolname = current_user) as bypass`,
      );
      expect(app[0]).toEqual({ u: APP_ROLE, bypass: false });
    } finally {
      await db.drop();
    }
  });

  it('lets concurrent processes migrate one database: each migration is applied exactly once', async () => {
    const db = await emptyDatabase();
    try {
      const results = await Promise.all([migrate(db.url), migrate(db.url), migrate(db.url)]);
      const applied = results.flatMap((r) => r.applied).sort();
      expect(applied).toEqual(listMigrations().map((m) => m.name));
      const rows = await query<{ name: string }>(db.url, 'select name from ordo_migration order by name');
      expect(rows.map((r) => r.name)).toEqual(listMigrations().map((m) => m.name));
    } finally {
      await db.drop();
    }
  });

  it('refuses a migration file changed after it was applied', async () => {
    const db = await emptyDatabase();
    try {
      const dir = migrationsDir({ '001_one.sql': 'create table one (id int);' });
      await migrate(db.url, { dir });
      fs.writeFileSync(path.join(dir, '001_one.sql'), 'create table one (id bigint);');
      await expect(migrate(db.url, { dir })).rejects.toThrow(/001_one\.sql changed after it was applied/);
    } finally {
      await db.drop();
    }
  });

  it('rolls back a failing migration entirely and records only those before it', async () => {
    const db = await emptyDatabase();
    try {
      const dir = migrationsDir({
        '001_ok.sql': 'create table ok_table (id int);',
        '002_bad.sql': 'create table half_table (id int);\nselect no_such_function();',
        '003_later.sql': 'create table later_table (id int);',
      });
      await expect(migrate(db.url, { dir })).rejects.toThrow(/migration 002_bad\.sql failed/);
      const names = await query<{ name: string }>(db.url, 'select name from ordo_migration order by name');
      expect(names.map((r) => r.name)).toEqual(['001_ok.sql']);
      const tables = await query<{ t: string }>(
        db.url,
        `select tablename as t from pg_tables where schemaname = 'public' order by 1`,
      );
      expect(tables.map((r) => r.t)).toEqual(['ok_table', 'ordo_migration']);
    } finally {
      await db.drop();
    }
  });
});
