import { Kysely, PostgresDialect, sql, type Transaction } from 'kysely';
import pg from 'pg';
import type { DB } from './db.generated';
import { brandTenantTx, type SystemDb, type SystemTx, type TenantTx } from './handles';
import { queryThroughCallbacks, withoutStatementNames } from './pg-query';
import { PlanRefresh } from './prepared';

// bigint (int8) and numeric come back as strings by default; counters and sequence numbers fit in a double.
pg.types.setTypeParser(pg.types.builtins.INT8, (v) => Number(v));

export interface DatabaseUrls {
  /** Non-owner role, no BYPASSRLS: every request transaction. Direct to PostgreSQL. */
  app: string;
  /**
   * Non-owner role with BYPASSRLS: cross-tenant system work only. Direct to PostgreSQL: what holds
   * a session (LISTEN, a session advisory lock, graphile-worker's runner) connects with it.
   */
  system: string;
  /**
   * A transaction-mode pooler (postgres://host:port/dbname, no credentials) in front of the same
   * database: the app and system pools connect through it, each with its role's credentials.
   * Their work binds nothing to a session (the tenant is bound per transaction, by set_config(…,
   * true)); named statements are off unless asked for (DatabaseOptions.preparedStatements).
   */
  pooler?: string;
}

export interface DatabaseOptions {
  poolSize: number;
  applicationName: string;
  /**
   * Whether the pools send named (parse-once) prepared statements. Default: yes, except through a
   * pooler (PgBouncer before 1.21 runs each statement on whichever server connection is free,
   * where a name prepared on another is unknown).
   */
  preparedStatements?: boolean;
  /**
   * Test-only (ORDO_CHAOS_COMMIT_ERROR_RATE; 0 or absent in production): the fraction of successful
   * COMMITs, and of the engine's one-statement hops, that the caller sees as a lost connection.
   */
  chaosCommitErrorRate?: number;
}

/**
 * The process's connections. Request code gets tenant-scoped transactions; system work gets the
 * clearly named system handle. Neither connects as the owner of any table.
 */
export class Database {
  readonly appPool: pg.Pool;
  readonly systemPool: pg.Pool;
  private readonly app: Kysely<DB>;
  readonly system: SystemDb;
  /** Re-plans the prepared handles' statements as the hot tables grow (see preparedKysely). */
  readonly planRefresh: PlanRefresh;
  /** Whether the pools send named prepared statements (preparedKysely follows it). */
  readonly preparedStatements: boolean;

  constructor(
    readonly urls: DatabaseUrls,
    opts: DatabaseOptions,
  ) {
    const appSize = Math.max(2, Math.ceil(opts.poolSize * 0.6));
    const sysSize = Math.max(2, opts.poolSize - appSize);
    const chaos = opts.chaosCommitErrorRate ?? 0;
    this.preparedStatements = opts.preparedStatements ?? urls.pooler === undefined;
    const via = (url: string) => (urls.pooler === undefined ? url : throughPooler(url, urls.pooler));
    const named = this.preparedStatements;
    this.appPool = newPool(via(urls.app), appSize, `${opts.applicationName}:app`, chaos, named);
    this.systemPool = newPool(via(urls.system), sysSize, `${opts.applicationName}:system`, chaos, named);
    this.app = new Kysely<DB>({ dialect: new PostgresDialect({ pool: this.appPool }) });
    this.system = new Kysely<DB>({ dialect: new PostgresDialect({ pool: this.systemPool }) }) as SystemDb;
    this.planRefresh = new PlanRefresh(this.systemPool);
  }

  /** Runs `fn` in a transaction bound to `tenantId`: RLS limits every statement to that tenant. */
  async withTenant<T>(tenantId: string, fn: (tx: TenantTx) => Promise<T>): Promise<T> {
    return tenantTransaction(this.app, tenantId, fn);
  }

  /**
   * Runs `fn` in a transaction bound to `tenantId` and to an external worker's `pool`: RLS limits
   * every statement to that tenant, and the worker tables to that pool.
   */
  async withWorkerPool<T>(tenantId: string, pool: string, fn: (tx: TenantTx) => Promise<T>): Promise<T> {
    return tenantTransaction(this.app, tenantId, fn, pool);
  }

  /** Runs `fn` in a cross-tenant system transaction. */
  async withSystem<T>(fn: (tx: SystemTx) => Promise<T>): Promise<T> {
    return this.system.transaction().execute((trx: Transaction<DB>) => fn(trx as SystemTx));
  }

  async ping(): Promise<void> {
    await sql`select 1`.execute(this.system);
  }

  async close(): Promise<void> {
    this.planRefresh.stop();
    await Promise.allSettled([this.app.destroy(), this.system.destroy()]);
  }
}

/**
 * A transaction on `handle` (a handle on the application pool) bound to `tenantId` for its
 * duration: the one place the tenant binding that RLS reads is set. BEGIN and the binding go in
 * one round trip (two statements in one simple query, the tenant id as an escaped literal); a
 * failure in `fn` or at COMMIT leaves nothing written.
 */
export function tenantTransaction<T>(
  handle: Kysely<DB>,
  tenantId: string,
  fn: (tx: TenantTx) => Promise<T>,
  workerPool?: string,
): Promise<T> {
  const pool = workerPool === undefined ? '' : `, set_config('app.worker_pool', ${pg.escapeLiteral(workerPool)}, true)`;
  return handle.connection().execute(async (conn) => {
    await sql
      .raw(`begin; select set_config('app.tenant_id', ${pg.escapeLiteral(tenantId)}, true)${pool}`)
      .execute(conn);
    let result: T;
    try {
      result = await fn(brandTenantTx(conn as Transaction<DB>, tenantId));
    } catch (e) {
      await sql
        .raw('rollback')
        .execute(conn)
        .catch(() => undefined);
      throw e;
    }
    await sql.raw('commit').execute(conn);
    return result;
  });
}

/**
 * `url` (a role's direct connection) pointed at `pooler`: the pooler's host, port and parameters,
 * and its database name when it gives one (else `url`'s), with the role's user and password.
 */
export function throughPooler(url: string, pooler: string): string {
  const u = new URL(url);
  const p = new URL(pooler);
  p.username = u.username;
  p.password = u.password;
  if (p.pathname === '' || p.pathname === '/') p.pathname = u.pathname;
  return p.toString();
}

function newPool(
  connectionString: string,
  max: number,
  applicationName: string,
  chaosRate: number,
  namedStatements: boolean,
): pg.Pool {
  const pool = new pg.Pool({
    connectionString,
    max,
    application_name: applicationName,
    idleTimeoutMillis: 30_000,
    connectionTimeoutMillis: 10_000,
    keepAlive: true,
  });
  // A dropped idle connection must not crash the process; the pool replaces it.
  pool.on('error', () => undefined);
  // pg-pool listens for errors only while a client is idle: a connection dropped while checked out
  // (server restart, pg_terminate_backend between two statements of a transaction) would be an
  // unhandled 'error' event. The holder's next query fails instead and the pool discards the client.
  pool.on('connect', (client) => {
    client.on('error', () => undefined);
    // Libraries that name their statements (rate-limiter-flexible) send them unnamed instead.
    if (!namedStatements) withoutStatementNames(client);
    queryThroughCallbacks(client);
  });
  if (chaosRate > 0) pool.on('connect', (client) => injectCommitErrors(client, Math.min(chaosRate, 1)));
  return pool;
}

/**
 * The test-only switch ORDO_CHAOS_COMMIT_ERROR_RATE: a `rate` of successful COMMITs (and of the
 * engine's one-statement hops) fail as a lost connection would. The chaos harness uses it to prove
 * that a write whose commit outcome is unknown is safe to repeat (idempotent or fenced).
 */
function injectCommitErrors(client: pg.PoolClient, rate: number): void {
  const query = client.query.bind(client) as (...args: unknown[]) => unknown;
  client.query = ((...args: unknown[]) => {
    const result = query(...args);
    // A COMMIT, or the engine's hop, a statement that commits on its own.
    const text = typeof args[0] === 'string' ? args[0] : (args[0] as { text?: unknown } | undefined)?.text;
    const commits =
      text === 'commit' ||
      (typeof text === 'string' && (text.includes('ordo_engine_advance(') || text.includes('ordo_engine_chain(')));
    if (!commits || !(result instanceof Promise) || Math.random() >= rate) return result;
    return result.then(() => {
      throw Object.assign(new Error('Connection terminated unexpectedly (injected after a successful commit)'), {
        code: 'ORDO_CHAOS_COMMIT_ERROR',
      });
    });
  }) as typeof client.query;
}
