import { createHash, createHmac, pbkdf2Sync } from 'node:crypto';
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

export interface FunctionFile {
  /** The file's name without `.sql`: the function (or trigger function) it defines. */
  name: string;
  sql: string;
  /** SHA-256 of the file's text. */
  checksum: string;
  /** A query whose answer joins the checksum (`-- ordo:checksum-with <query>`): data the file derives from. */
  checksumWith?: string;
}

/** Where the numbered migrations and the function files live. */
export const MIGRATIONS_DIR = ['db', 'migrations'];
export const FUNCTIONS_DIR = ['db', 'functions'];

/**
 * The database's last migration of the numbered series Ordo had before the baseline
 * (001_baseline.sql): a database that applied the whole series has that baseline's schema and is
 * adopted as such; one that stopped earlier is refused.
 */
const SERIES_BEFORE_BASELINE_LAST = '033_notify_collect_linear.sql';
const BASELINE = '001_baseline.sql';

const sha256 = (text: string) => createHash('sha256').update(text).digest('hex');

const listed = new Map<string, MigrationFile[] | FunctionFile[]>();

/** The build's own files, read once per process (they do not change while it runs); another directory, each time. */
function once<T extends MigrationFile[] | FunctionFile[]>(
  dir: string | undefined,
  own: string[],
  read: (d: string) => T,
): T {
  if (dir !== undefined) return read(dir);
  const key = own.join('/');
  let files = listed.get(key) as T | undefined;
  if (!files) listed.set(key, (files = read(path.join(projectRoot(), ...own))));
  return files;
}

export function listMigrations(dir?: string): MigrationFile[] {
  return once(dir, MIGRATIONS_DIR, readMigrations);
}

export function listFunctions(dir?: string): FunctionFile[] {
  return once(dir, FUNCTIONS_DIR, readFunctions);
}

function readMigrations(dir: string): MigrationFile[] {
  return fs
    .readdirSync(dir)
    .filter((f) => /^\d{3,}_[a-z0-9_]+\.sql$/.test(f))
    .sort()
    .map((name) => {
      const sql = fs.readFileSync(path.join(dir, name), 'utf8');
      return { name, sql, checksum: sha256(sql) };
    });
}

function readFunctions(dir: string): FunctionFile[] {
  return fs
    .readdirSync(dir)
    .filter((f) => /^[a-z_][a-z0-9_]*\.sql$/.test(f))
    .sort()
    .map((file) => {
      const sql = fs.readFileSync(path.join(dir, file), 'utf8');
      const checksumWith = /^-- ordo:checksum-with (.+)$/m.exec(sql)?.[1];
      return { name: file.slice(0, -'.sql'.length), sql, checksum: sha256(sql), checksumWith };
    });
}

export interface MigrateResult {
  /** Migrations and function files applied by this call. */
  applied: string[];
  appUrl: string;
  systemUrl: string;
}

export interface MigrateOptions {
  /** Directory of the numbered migrations (tests); default db/migrations. */
  dir?: string;
  /** Directory of the function files (tests); default db/functions. */
  functionsDir?: string;
  log?: (msg: string) => void;
  /** The application roles' session timeouts in this database (absent: left as they are). */
  timeouts?: RoleTimeouts;
}

/**
 * statement_timeout and idle_in_transaction_session_timeout of the application and system roles,
 * in milliseconds (0: none). Set on the roles in the database (ALTER ROLE … IN DATABASE … SET),
 * so every new session of those roles starts with them, whether it comes directly or through a
 * pooler (which does not pass a client's startup options on). The owner, which migrates, keeps
 * the server's defaults.
 */
export interface RoleTimeouts {
  statementMs: number;
  idleInTransactionMs: number;
}

/**
 * Brings the database to the current schema, as the owner, under an advisory lock so that any
 * number of processes can call it at start. Creates the two login roles the application uses
 * (neither owns a table); applies the numbered migrations once each (a changed applied file is an
 * error: migrations are frozen); then every function file whose checksum differs from the one
 * recorded (`create or replace`: a changed function is re-applied, a deleted file's function
 * dropped); then graphile-worker's own schema, then its grants.
 */
export async function migrate(ownerUrl: string, opts: MigrateOptions = {}): Promise<MigrateResult> {
  const log = opts.log ?? (() => undefined);
  const files = listMigrations(opts.dir);
  const functions = listFunctions(opts.functionsDir);
  const client = new pg.Client({ connectionString: ownerUrl, application_name: 'ordo:migrate' });
  await client.connect();
  const applied: string[] = [];
  const { app, system } = rolePasswords(ownerUrl);
  try {
    await client.query('select pg_advisory_lock($1)', [MIGRATION_LOCK]);
    await ensureRoles(client, app, system);
    if (opts.timeouts) await setRoleTimeouts(client, opts.timeouts);
    await client.query(`create table if not exists ordo_migration (
      name text primary key, checksum text not null, applied_at timestamptz not null default now())`);
    await client.query(`create table if not exists ordo_function (
      name text primary key, checksum text not null, applied_at timestamptz not null default now())`);
    await client.query(`grant select on ordo_migration, ordo_function to ${APP_ROLE}, ${SYSTEM_ROLE}`);
    const { rows } = await client.query<{ name: string; checksum: string }>(
      'select name, checksum from ordo_migration',
    );
    const done = new Map(rows.map((r) => [r.name, r.checksum]));
    await adoptSeriesBeforeBaseline(client, done, files, log);
    for (const f of files) {
      const prior = done.get(f.name);
      if (prior !== undefined) {
        if (prior !== f.checksum)
          throw new Error(`migration ${f.name} changed after it was applied; add a new migration instead`);
        continue;
      }
      await inTransaction(client, `migration ${f.name}`, async () => {
        await client.query(f.sql);
        await client.query('insert into ordo_migration (name, checksum) values ($1, $2)', [f.name, f.checksum]);
      });
      applied.push(f.name);
      log(`applied migration ${f.name}`);
    }
    applied.push(...(await applyFunctions(client, functions, log)));
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

async function inTransaction(client: pg.Client, what: string, fn: () => Promise<void>): Promise<void> {
  await client.query('begin');
  try {
    await fn();
    await client.query('commit');
  } catch (e) {
    await client.query('rollback');
    throw new Error(`${what} failed: ${(e as Error).message}`);
  }
}

/**
 * A database migrated by the whole numbered series that preceded the baseline holds exactly the
 * baseline's schema: it is recorded as having applied the baseline (its function files are then
 * applied like any database's). A database that stopped partway through that series is refused.
 */
async function adoptSeriesBeforeBaseline(
  client: pg.Client,
  done: Map<string, string>,
  files: MigrationFile[],
  log: (msg: string) => void,
): Promise<void> {
  const baseline = files.find((f) => f.name === BASELINE);
  if (!baseline || done.has(BASELINE) || done.size === 0) return;
  const older = [...done.keys()].filter((n) => !files.some((f) => f.name === n)).sort();
  if (older.length === 0) return;
  if (!done.has(SERIES_BEFORE_BASELINE_LAST))
    throw new Error(
      `this database was migrated by an earlier Ordo, up to ${older[older.length - 1]}, which this version cannot ` +
        `continue: start the Ordo of 2026-11-25 (git d849ac0) on it once to bring it to ${SERIES_BEFORE_BASELINE_LAST}, ` +
        'or start this version on a new database (another ORDO_HOME or DATABASE_URL)',
    );
  await inTransaction(client, 'adopting the migrations before the baseline', async () => {
    await client.query('delete from ordo_migration where name = any($1)', [older]);
    await client.query('insert into ordo_migration (name, checksum) values ($1, $2)', [BASELINE, baseline.checksum]);
  });
  done.clear();
  done.set(BASELINE, baseline.checksum);
  log(`recorded migrations ${older[0]} to ${older[older.length - 1]} as ${BASELINE}`);
}

/** The checksum a function file is recorded with: its text's, joined by its checksum-with query's answer. */
async function functionChecksum(
  query: (sql: string) => Promise<{ rows: Record<string, unknown>[] }>,
  f: FunctionFile,
): Promise<string> {
  if (!f.checksumWith) return f.checksum;
  const { rows } = await query(f.checksumWith);
  return sha256(`${f.checksum}\n${JSON.stringify(rows)}`);
}

/**
 * Applies each function file whose checksum differs from the one recorded, each in a transaction
 * of its own, with function bodies checked when called rather than when created (so files apply
 * in name order whatever calls what); drops the functions of recorded files that are gone.
 */
async function applyFunctions(client: pg.Client, files: FunctionFile[], log: (msg: string) => void): Promise<string[]> {
  const { rows } = await client.query<{ name: string; checksum: string }>('select name, checksum from ordo_function');
  const recorded = new Map(rows.map((r) => [r.name, r.checksum]));
  const applied: string[] = [];
  for (const f of files) {
    const checksum = await functionChecksum((q) => client.query(q), f);
    if (recorded.get(f.name) === checksum) continue;
    await inTransaction(client, `function file ${f.name}.sql`, async () => {
      await client.query('set local check_function_bodies = off');
      await client.query(f.sql);
      await client.query(
        `insert into ordo_function (name, checksum) values ($1, $2)
         on conflict (name) do update set checksum = excluded.checksum, applied_at = now()`,
        [f.name, checksum],
      );
    });
    applied.push(`${f.name}.sql`);
    log(`applied function file ${f.name}.sql`);
  }
  for (const name of recorded.keys()) {
    if (files.some((f) => f.name === name)) continue;
    await inTransaction(client, `dropping function ${name}`, async () => {
      const { rows: procs } = await client.query<{ sig: string }>(
        `select p.oid::regprocedure::text as sig from pg_proc p join pg_namespace n on n.oid = p.pronamespace
         where n.nspname = 'public' and p.proname = $1`,
        [name],
      );
      for (const p of procs) await client.query(`drop function ${p.sig}`);
      await client.query('delete from ordo_function where name = $1', [name]);
    });
    log(`dropped function ${name} (its file is gone)`);
  }
  return applied;
}

/** Connection URLs of the application and system roles for the database `ownerUrl` names. */
export function applicationUrls(ownerUrl: string): { appUrl: string; systemUrl: string } {
  const { app, system } = rolePasswords(ownerUrl);
  return {
    appUrl: withCredentials(ownerUrl, APP_ROLE, app),
    systemUrl: withCredentials(ownerUrl, SYSTEM_ROLE, system),
  };
}

/** Migrations this build knows that the database has not applied, and function files it has not applied as they are. */
export async function pendingMigrations(
  query: (sql: string) => Promise<{ rows: Record<string, unknown>[] }>,
): Promise<string[]> {
  const done = new Set((await query('select name from ordo_migration')).rows.map((r) => String(r.name)));
  const migrations = listMigrations()
    .map((m) => m.name)
    .filter((n) => !done.has(n));
  const recorded = new Map(
    (await query('select name, checksum from ordo_function')).rows.map((r) => [String(r.name), String(r.checksum)]),
  );
  const functions: string[] = [];
  for (const f of listFunctions())
    if (recorded.get(f.name) !== (await functionChecksum(query, f))) functions.push(`${f.name}.sql`);
  return [...migrations, ...functions];
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
  // A password is set only when the stored one is not it: setting it again would store a new salt,
  // and a pooler that logs in with the stored SCRAM secret (PgBouncer's auth_file) would be refused.
  const stored = new Map(
    (
      await client
        .query<{ rolname: string; rolpassword: string | null }>(
          'select rolname, rolpassword from pg_authid where rolname = any($1)',
          [[APP_ROLE, SYSTEM_ROLE]],
        )
        .catch(() => ({ rows: [] }))
    ).rows.map((r) => [r.rolname, r.rolpassword]),
  );
  const password = (role: string, p: string) =>
    scramSecretOf(stored.get(role), p) ? '' : ` password ${pg.escapeLiteral(p)}`;
  await client.query(`alter role ${APP_ROLE} with login nobypassrls${password(APP_ROLE, appPassword)}`);
  await client.query(`alter role ${SYSTEM_ROLE} with login bypassrls${password(SYSTEM_ROLE, systemPassword)}`);
  const db = (await client.query<{ db: string }>('select current_database() as db')).rows[0].db;
  await client.query(`grant connect, temporary on database ${pg.escapeIdentifier(db)} to ${APP_ROLE}, ${SYSTEM_ROLE}`);
  await client.query(`grant usage on schema public to ${APP_ROLE}, ${SYSTEM_ROLE}`);
}

async function setRoleTimeouts(client: pg.Client, t: RoleTimeouts): Promise<void> {
  const db = pg.escapeIdentifier((await client.query<{ db: string }>('select current_database() as db')).rows[0].db);
  for (const role of [APP_ROLE, SYSTEM_ROLE]) {
    await client.query(`alter role ${role} in database ${db} set statement_timeout = ${Math.trunc(t.statementMs)}`);
    await client.query(
      `alter role ${role} in database ${db} set idle_in_transaction_session_timeout = ${Math.trunc(t.idleInTransactionMs)}`,
    );
  }
}

/** Whether `secret` (a role's pg_authid.rolpassword) is a SCRAM-SHA-256 secret of `password` (RFC 5802). */
function scramSecretOf(secret: string | null | undefined, password: string): boolean {
  const m = /^SCRAM-SHA-256\$(\d+):([^$]+)\$([^:]+):/.exec(secret ?? '');
  if (!m) return false;
  const salted = pbkdf2Sync(password, Buffer.from(m[2], 'base64'), Number(m[1]), 32, 'sha256');
  const clientKey = createHmac('sha256', salted).update('Client Key').digest();
  return createHash('sha256').update(clientKey).digest('base64') === m[3];
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
