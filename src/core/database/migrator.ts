import { createHash, createHmac } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import pg from 'pg';
import { projectRoot } from '../home/project-root';

export const APP_ROLE = 'ordo_app';
export const SYSTEM_ROLE = 'ordo_system';
const MIGRATION_LOCK = 7_262_001;

export interface MigrationFile {
  name: string;
  sql: string;
  checksum: string;
}

export function listMigrations(dir = path.join(projectRoot(), 'migrations')): MigrationFile[] {
  return fs
    .readdirSync(dir)
    .filter((f) => /^\d{3,}_[a-z0-9_]+\.sql$/.test(f))
    .sort()
    .map((name) => {
      const sql = fs.readFileSync(path.join(dir, name), 'utf8');
      return { name, sql, checksum: createHash('sha256').update(sql).digest('hex') };
    });
}

export interface MigrateResult {
  applied: string[];
  appUrl: string;
  systemUrl: string;
}

/**
 * Brings the database to the current schema, as the owner, under an advisory lock so that any
 * number of processes can call it at start. Creates the two login roles the application uses
 * (neither owns a table), applies the numbered SQL migrations once each (a changed applied file is
 * an error: migrations are frozen), then graphile-worker's own schema, then its grants.
 */
export async function migrate(
  ownerUrl: string,
  opts: { dir?: string; log?: (msg: string) => void } = {},
): Promise<MigrateResult> {
  const log = opts.log ?? (() => undefined);
  const files = listMigrations(opts.dir);
  const client = new pg.Client({ connectionString: ownerUrl, application_name: 'ordo:migrate' });
  await client.connect();
  const applied: string[] = [];
  const { app, system } = rolePasswords(ownerUrl);
  try {
    await client.query('select pg_advisory_lock($1)', [MIGRATION_LOCK]);
    await ensureRoles(client, app, system);
    await client.query(`create table if not exists ordo_migration (
      name text primary key, checksum text not null, applied_at timestamptz not null default now())`);
    await client.query(`grant select on ordo_migration to ${APP_ROLE}, ${SYSTEM_ROLE}`);
    const { rows } = await client.query<{ name: string; checksum: string }>(
      'select name, checksum from ordo_migration',
    );
    const done = new Map(rows.map((r) => [r.name, r.checksum]));
    for (const f of files) {
      const prior = done.get(f.name);
      if (prior !== undefined) {
        if (prior !== f.checksum)
          throw new Error(`migration ${f.name} changed after it was applied; add a new migration instead`);
        continue;
      }
      await client.query('begin');
      try {
        await client.query(f.sql);
        await client.query('insert into ordo_migration (name, checksum) values ($1, $2)', [f.name, f.checksum]);
        await client.query('commit');
      } catch (e) {
        await client.query('rollback');
        throw new Error(`migration ${f.name} failed: ${(e as Error).message}`);
      }
      applied.push(f.name);
      log(`applied migration ${f.name}`);
    }
    const { runMigrations } = await import('graphile-worker');
    await runMigrations({ connectionString: ownerUrl, logger: await silentGraphileLogger() });
    for (const role of [APP_ROLE, SYSTEM_ROLE]) {
      await client.query(`grant usage on schema graphile_worker to ${role}`);
      await client.query(`grant select, insert, update, delete on all tables in schema graphile_worker to ${role}`);
      await client.query(`grant usage, select on all sequences in schema graphile_worker to ${role}`);
      await client.query(`grant execute on all functions in schema graphile_worker to ${role}`);
    }
  } finally {
    await client.query('select pg_advisory_unlock($1)', [MIGRATION_LOCK]).catch(() => undefined);
    await client.end();
  }
  return { applied, ...applicationUrls(ownerUrl) };
}

/** Connection URLs of the application and system roles for the database `ownerUrl` names. */
export function applicationUrls(ownerUrl: string): { appUrl: string; systemUrl: string } {
  const { app, system } = rolePasswords(ownerUrl);
  return {
    appUrl: withCredentials(ownerUrl, APP_ROLE, app),
    systemUrl: withCredentials(ownerUrl, SYSTEM_ROLE, system),
  };
}

/** Names of the migrations this build knows that the database has not applied. */
export async function pendingMigrations(
  query: (sql: string) => Promise<{ rows: { name: string }[] }>,
): Promise<string[]> {
  const { rows } = await query('select name from ordo_migration');
  const done = new Set(rows.map((r) => r.name));
  return listMigrations()
    .map((m) => m.name)
    .filter((n) => !done.has(n));
}

async function ensureRoles(client: pg.Client, appPassword: string, systemPassword: string): Promise<void> {
  // Roles are cluster-wide; creating one concurrently from two databases raises unique_violation.
  const create = async (role: string, attrs: string) => {
    await client
      .query(
        `do $$ begin if not exists (select from pg_roles where rolname = '${role}') then create role ${role} ${attrs}; end if; end $$`,
      )
      .catch((e: { code?: string }) => {
        if (e.code !== '23505' && e.code !== '42710') throw e;
      });
  };
  await create(APP_ROLE, 'login nosuperuser nocreatedb nocreaterole noinherit nobypassrls');
  await create(SYSTEM_ROLE, 'login nosuperuser nocreatedb nocreaterole noinherit bypassrls');
  await client.query(`alter role ${APP_ROLE} with login nobypassrls password ${pg.escapeLiteral(appPassword)}`);
  await client.query(`alter role ${SYSTEM_ROLE} with login bypassrls password ${pg.escapeLiteral(systemPassword)}`);
  const db = (await client.query<{ db: string }>('select current_database() as db')).rows[0].db;
  await client.query(`grant connect, temporary on database ${pg.escapeIdentifier(db)} to ${APP_ROLE}, ${SYSTEM_ROLE}`);
  await client.query(`grant usage on schema public to ${APP_ROLE}, ${SYSTEM_ROLE}`);
}

/**
 * The application roles' passwords derive from the owner's credentials, so every replica that
 * knows the owner URL computes the same ones and nothing secret is stored where the roles can read.
 */
function rolePasswords(ownerUrl: string): { app: string; system: string } {
  const u = new URL(ownerUrl);
  const key = `${decodeURIComponent(u.username)}:${decodeURIComponent(u.password)}:${u.host}`;
  const derive = (role: string) => createHmac('sha256', key).update(`ordo-role:${role}`).digest('base64url');
  return { app: derive(APP_ROLE), system: derive(SYSTEM_ROLE) };
}

function withCredentials(url: string, user: string, password: string): string {
  const u = new URL(url);
  u.username = encodeURIComponent(user);
  u.password = encodeURIComponent(password);
  return u.toString();
}

async function silentGraphileLogger() {
  // graphile-worker's Logger takes a factory of scoped log functions.
  const { Logger } = await import('graphile-worker');
  return new Logger(() => () => undefined);
}
