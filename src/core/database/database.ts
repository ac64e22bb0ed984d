import { Kysely, PostgresDialect, sql, type Transaction } from 'kysely';
import pg from 'pg';
import type { DB } from './db.generated';
import { brandTenantTx, type SystemDb, type SystemTx, type TenantTx } from './handles';
import { queryThroughCallbacks } from './pg-query';
import { PlanRefresh } from './prepared';

// bigint (int8) and numeric come back as strings by default; counters and sequence numbers fit in a double.
pg.types.setTypeParser(pg.types.builtins.INT8, (v) => Number(v));

export interface DatabaseUrls {
  /** Non-owner role, no BYPASSRLS: every request transaction. */
  app: string;
  /** Non-owner role with BYPASSRLS: cross-tenant system work only. */
  system: string;
}

export interface DatabaseOptions {
  poolSize: number;
  applicationName: string;
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

  constructor(
    readonly urls: DatabaseUrls,
    opts: DatabaseOptions,
  ) {
    const appSize = Math.max(2, Math.ceil(opts.poolSize * 0.6));
    const sysSize = Math.max(2, opts.poolSize - appSize);
    const chaos = opts.chaosCommitErrorRate ?? 0;
    this.appPool = newPool(urls.app, appSize, `${opts.applicationName}:app`, chaos);
    this.systemPool = newPool(urls.system, sysSize, `${opts.applicationName}:system`, chaos);
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

function newPool(connectionString: string, max: number, applicationName: string, chaosRate: number): pg.Pool {
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
