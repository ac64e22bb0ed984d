import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import {
  APP_ROLE,
  applicationUrls,
  listFunctions,
  listMigrations,
  migrate,
  pendingMigrations,
} from '../../src/core/database/migrator';
import { createEmptyDatabase } from '../support/empty-database';

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
  const all = () => [...listMigrations().map((m) => m.name), ...listFunctions().map((f) => `${f.name}.sql`)];
  const migrationsDir = (files: Record<string, string>) => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ordo-migrations-'));
    dirs.push(dir);
    for (const [name, sql] of Object.entries(files)) fs.writeFileSync(path.join(dir, name), sql);
    return dir;
  };
  afterAll(() => dirs.forEach((d) => fs.rmSync(d, { recursive: true, force: true })));

  it('applies every migration once, then nothing on the next run, and reports none pending', async () => {
    const db = await createEmptyDatabase();
    try {
      const first = await migrate(db.url);
      expect(first.applied).toEqual(all());
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
    const db = await createEmptyDatabase();
    try {
      const results = await Promise.all([migrate(db.url), migrate(db.url), migrate(db.url)]);
      const applied = results.flatMap((r) => r.applied).sort();
      expect(applied).toEqual(all().sort());
      const rows = await query<{ name: string }>(db.url, 'select name from ordo_migration order by name');
      expect(rows.map((r) => r.name)).toEqual(listMigrations().map((m) => m.name));
    } finally {
      await db.drop();
    }
  });

  it('refuses a migration file changed after it was applied', async () => {
    const db = await createEmptyDatabase();
    try {
      const dir = migrationsDir({ '001_one.sql': 'create table one (id int);' });
      const functionsDir = migrationsDir({});
      await migrate(db.url, { dir, functionsDir });
      fs.writeFileSync(path.join(dir, '001_one.sql'), 'create table one (id bigint);');
      await expect(migrate(db.url, { dir, functionsDir })).rejects.toThrow(/001_one\.sql changed after it was applied/);
    } finally {
      await db.drop();
    }
  });

  it('rolls back a failing migration entirely and records only those before it', async () => {
    const db = await createEmptyDatabase();
    try {
      const dir = migrationsDir({
        '001_ok.sql': 'create table ok_table (id int);',
        '002_bad.sql': 'create table half_table (id int);\nselect no_such_function();',
        '003_later.sql': 'create table later_table (id int);',
      });
      await expect(migrate(db.url, { dir, functionsDir: migrationsDir({}) })).rejects.toThrow(
        /migration 002_bad\.sql failed/,
      );
      const names = await query<{ name: string }>(db.url, 'select name from ordo_migration order by name');
      expect(names.map((r) => r.name)).toEqual(['001_ok.sql']);
      const tables = await query<{ t: string }>(
        db.url,
        `select tablename as t from pg_tables where schemaname = 'public' order by 1`,
      );
      expect(tables.map((r) => r.t)).toEqual(['ok_table', 'ordo_function', 'ordo_migration']);
    } finally {
      await db.drop();
    }
  });

  it('applies a function file again when it changes, and drops the function of a file that is gone', async () => {
    const db = await createEmptyDatabase();
    try {
      const dir = migrationsDir({ '001_t.sql': 'create table t (n int);' });
      const fn = (body: string) =>
        `create or replace function answer() returns int language sql as $$ select ${body} $$;`;
      const functionsDir = migrationsDir({ 'answer.sql': fn('1'), 'other.sql': fn('0').replace('answer', 'other') });
      expect((await migrate(db.url, { dir, functionsDir })).applied).toEqual(['001_t.sql', 'answer.sql', 'other.sql']);
      expect((await migrate(db.url, { dir, functionsDir })).applied).toEqual([]);
      fs.writeFileSync(path.join(functionsDir, 'answer.sql'), fn('42'));
      fs.rmSync(path.join(functionsDir, 'other.sql'));
      expect((await migrate(db.url, { dir, functionsDir })).applied).toEqual(['answer.sql']);
      expect(await query<{ a: number }>(db.url, 'select answer() as a')).toEqual([{ a: 42 }]);
      const left = await query<{ n: string }>(db.url, `select proname as n from pg_proc where proname = 'other'`);
      expect(left).toEqual([]);
      const recorded = await query<{ name: string }>(db.url, 'select name from ordo_function order by name');
      expect(recorded.map((r) => r.name)).toEqual(['answer']);
    } finally {
      await db.drop();
    }
  });

  it('applies a function file again when the data its checksum-with query reads changes', async () => {
    const db = await createEmptyDatabase();
    try {
      const dir = migrationsDir({ '001_t.sql': 'create table limits (n int); insert into limits values (1);' });
      const functionsDir = migrationsDir({
        'top.sql':
          '-- ordo:checksum-with select max(n) from limits\n' +
          `do $$ begin execute format('create or replace function top() returns int language sql as %L', 'select ' || (select max(n) from limits)); end $$;`,
      });
      await migrate(db.url, { dir, functionsDir });
      expect(await query<{ a: number }>(db.url, 'select top() as a')).toEqual([{ a: 1 }]);
      expect((await migrate(db.url, { dir, functionsDir })).applied).toEqual([]);
      await query(db.url, 'insert into limits values (7)');
      expect((await migrate(db.url, { dir, functionsDir })).applied).toEqual(['top.sql']);
      expect(await query<{ a: number }>(db.url, 'select top() as a')).toEqual([{ a: 7 }]);
    } finally {
      await db.drop();
    }
  });

  it('adopts a database migrated by the series before the baseline, and refuses one that stopped partway', async () => {
    const before = ['001_foundation.sql', '020_notify_after_commit.sql', '033_notify_collect_linear.sql'];
    for (const [names, adopted] of [
      [before, true],
      [before.slice(0, 2), false],
    ] as const) {
      const db = await createEmptyDatabase();
      try {
        // A database as the earlier series left it: the baseline's schema under the older names.
        const baselineOnly = migrationsDir({ '001_baseline.sql': listMigrations()[0].sql });
        await migrate(db.url, { dir: baselineOnly });
        await query(db.url, 'delete from ordo_migration');
        for (const n of names)
          await query(db.url, 'insert into ordo_migration (name, checksum) values ($1, $2)', [n, 'x']);
        if (adopted) {
          // Adopted as the baseline: only the migrations after it apply (and function files whose
          // checksum reads what they change).
          const migrationNames = new Set(listMigrations().map((m) => m.name));
          expect((await migrate(db.url)).applied.filter((n) => migrationNames.has(n))).toEqual(
            listMigrations()
              .slice(1)
              .map((m) => m.name),
          );
          const rows = await query<{ name: string }>(db.url, 'select name from ordo_migration order by name');
          expect(rows.map((r) => r.name)).toEqual(listMigrations().map((m) => m.name));
        } else {
          await expect(migrate(db.url)).rejects.toThrow(
            /migrated by an earlier Ordo, up to 020_notify_after_commit\.sql.*033_notify_collect_linear\.sql/,
          );
        }
      } finally {
        await db.drop();
      }
    }
  });

  it('reports a function file that differs from the one applied as pending', async () => {
    const db = await createEmptyDatabase();
    try {
      await migrate(db.url);
      await query(db.url, `update ordo_function set checksum = 'stale' where name = 'ordo_notify'`);
      const c = new pg.Client({ connectionString: db.url });
      await c.connect();
      expect(await pendingMigrations((q) => c.query(q))).toEqual(['ordo_notify.sql']);
      await c.end();
    } finally {
      await db.drop();
    }
  });

  it("keeps the roles' stored passwords (a pooler's SCRAM secrets stay valid) and sets their session timeouts in the database", async () => {
    const db = await createEmptyDatabase();
    try {
      await migrate(db.url, { timeouts: { statementMs: 120_000, idleInTransactionMs: 30_000 } });
      const secrets = () =>
        query<{ rolname: string; rolpassword: string }>(
          db.url,
          `select rolname, rolpassword from pg_authid where rolname in ('ordo_app', 'ordo_system') order by 1`,
        );
      const before = await secrets();
      expect(before.map((r) => r.rolpassword)).toEqual([expect.any(String), expect.any(String)]);
      await migrate(db.url, { timeouts: { statementMs: 0, idleInTransactionMs: 5_000 } });
      expect(await secrets()).toEqual(before);
      const settings = await query<{ role: string; setconfig: string[] }>(
        db.url,
        `select r.rolname as role, s.setconfig from pg_db_role_setting s join pg_roles r on r.oid = s.setrole
          where s.setdatabase = (select oid from pg_database where datname = current_database()) order by 1`,
      );
      expect(settings).toEqual(
        ['ordo_app', 'ordo_system'].map((role) => ({
          role,
          setconfig: ['statement_timeout=0', 'idle_in_transaction_session_timeout=5000'],
        })),
      );
      // A session of the role starts with them.
      const { appUrl } = applicationUrls(db.url);
      expect(await query(appUrl, `select current_setting('idle_in_transaction_session_timeout') as idle`)).toEqual([
        { idle: '5s' },
      ]);
    } finally {
      await db.drop();
    }
  });
});
