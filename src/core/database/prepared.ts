import { createHash } from 'node:crypto';
import { Kysely, PostgresDialect } from 'kysely';
import type pg from 'pg';
import type { DB } from './db.generated';

/** The tables whose growth re-plans the hot statements (the engine's, run creation's, external workers' tasks). */
const WATCHED_TABLES = ['run', 'step', 'queue_item', 'attempt', 'run_event', 'tenant_queue', 'artifact', 'worker_task'];
/** How often a busy process compares the watched tables' committed rows with what their statistics say. */
const CHECK_INTERVAL_MS = 1_000;
/**
 * Statistics below this many rows count as this many (a table growing from empty re-plans a
 * handful of times, not on every row). Low, because a plan made on the empty table costs a scan of
 * the tenant's rows per lookup: at a few hundred runs that already dominates a batch's work.
 */
const FLOOR_ROWS = 50;
/** Fewer connections than this taken in an interval is an idle process (its safety polls): no check. */
const BUSY_USES = 5;

/**
 * Keeps long-lived cached plans in step with table sizes. The engine's statements and functions
 * run with generic plans, made once per connection; a plan made while a table was empty sees every
 * index that leads with `tenant_id` as costing the same as the primary key, and may keep looking
 * rows up through one of them (scanning all of a tenant's entries per row) once the table holds
 * thousands of runs; and a plan made while the queue was empty joins a batch of keys with the queue
 * the wrong way round (every queue entry read once per key). PostgreSQL re-plans after an ANALYZE,
 * but autovacuum comes by once a minute at best. So while connections are in use, every
 * CHECK_INTERVAL_MS one query compares the committed rows of the watched tables (the statistics
 * collector's live tuples) with the row counts their statistics give the planner (reltuples); a
 * table that holds twice what its statistics say (at least twice FLOOR_ROWS, or was never analyzed)
 * is analyzed (db/functions/ordo_analyze_hot.sql: without statistics a new plan would still guess a
 * tenant's share of the table small), the generation moves on, and each prepared connection runs
 * DISCARD PLANS before its next use. A table growing from empty to a million rows is analyzed and
 * re-planned about fifteen times; an idle process (a few polls) issues no query.
 *
 * A session publishes its row counts when it goes idle, at most once a second: a session that wrote
 * again within the second (and then waits) publishes them only ten seconds later. So a creation of
 * FLOOR_ROWS runs or more (RunsRepository.createRuns) has its session publish them as it goes idle,
 * and its process compares the tables as soon as it has committed (committedRuns).
 *
 * Committed rows, not the file's size: a file grows with the rows of transactions still under way,
 * which ANALYZE does not count; analyzed in the middle of a large insert, the queue would come out
 * as an empty table of many pages, every plan made then would expect one row, and nothing would
 * analyze it again once its file stopped growing. And against the statistics, not against the last
 * re-plan here: autovacuum analyzes the queue whenever it likes, empty or not, and the next backlog
 * must be noticed however large the queue was before.
 */
export class PlanRefresh {
  private generation = 0;
  private uses = 0;
  /** The comparisons asked for, one after another, and how many of them have not ended. */
  private chain: Promise<void> = Promise.resolve();
  private pending = 0;
  /** The rows the planner was last seen to count in `run` (negative: not seen yet). */
  private plannedRuns = -1;
  private timer: NodeJS.Timeout | null = null;

  constructor(private readonly pool: pg.Pool) {}

  /** The current generation; counts a use of a connection (a busy process checks the tables). */
  current(): number {
    this.uses += 1;
    if (!this.timer) {
      this.timer = setInterval(() => void this.check(), CHECK_INTERVAL_MS);
      this.timer.unref();
    }
    return this.generation;
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }

  /** The interval's check: in a busy process, unless a comparison is under way (exported for tests). */
  check(): Promise<void> {
    if (this.uses < BUSY_USES || this.pending > 0) return Promise.resolve();
    this.uses = 0;
    return this.compare();
  }

  /**
   * A creation of `runs` runs has committed. A batch whose session publishes its counts at once
   * (`publishesCounts`) and that may have doubled `run` as the planner last counted it is compared
   * now, busy process or not, after any comparison under way (which may have read the counts
   * before the commit): a first batch on a fresh database would otherwise run on the empty
   * tables' plans until the next interval. Smaller batches into a larger table wait for the
   * interval, so a steady stream of creations adds no comparisons.
   */
  committedRuns(runs: number): Promise<void> {
    if (!publishesCounts(runs) || (this.plannedRuns >= 0 && runs < this.plannedRuns)) return Promise.resolve();
    return this.compare();
  }

  /** When the comparisons asked for so far have ended. */
  settled(): Promise<void> {
    return this.chain;
  }

  /**
   * Compares the watched tables' committed rows with their statistics, after those asked for
   * before; one already waiting its turn (not started) stands for this one too.
   */
  private compare(): Promise<void> {
    if (this.pending >= 2) return this.chain;
    this.pending += 1;
    this.chain = this.chain.then(async () => {
      try {
        await this.analyzeChanged();
      } catch {
        // The next check tries again (the database may be restarting).
      } finally {
        this.pending -= 1;
      }
    });
    return this.chain;
  }

  private async analyzeChanged(): Promise<void> {
    const { rows } = await this.pool.query<{ live: string; planned: number }>(
      // A partitioned table's rows are its partitions' (the statistics collector counts leaves only).
      `select coalesce(case when p.relkind = 'p'
                then (select sum(pg_stat_get_live_tuples(i.inhrelid)) from pg_inherits i where i.inhparent = p.oid)
                else pg_stat_get_live_tuples(p.oid) end, 0) as live,
              coalesce(p.reltuples, -1)::float8 as planned
       from unnest($1::text[]) with ordinality as u(t, n) left join pg_class p on p.oid = to_regclass(u.t)
       order by u.n`,
      [WATCHED_TABLES],
    );
    const changed = WATCHED_TABLES.filter(
      (_, i) => Number(rows[i].live) >= 2 * Math.max(FLOOR_ROWS, Number(rows[i].planned)),
    );
    const run = WATCHED_TABLES.indexOf('run');
    this.plannedRuns = changed.includes('run') ? Number(rows[run].live) : Number(rows[run].planned);
    if (changed.length > 0) {
      // Statistics first, so that the new plans see how the rows are spread (not only how many).
      await this.pool.query('select ordo_analyze_hot($1::text[])', [changed]).catch(() => undefined);
      this.generation += 1;
    }
  }
}

/**
 * Whether a creation of `runs` runs has its session publish its row counts as it goes idle
 * (RunsRepository.createRuns), to be compared at once (PlanRefresh.committedRuns).
 */
export function publishesCounts(runs: number): boolean {
  return runs >= FLOOR_ROWS;
}

/**
 * A Kysely handle on `pool` in which every parameterised statement is sent as a named prepared
 * statement (name = prefix + hash of its text), so PostgreSQL parses and plans each of these
 * statements once per connection (and again after a re-plan, see PlanRefresh) instead of on every
 * call. For callers whose statement texts are fixed (bulk parameters are arrays), so the set of
 * prepared statements per connection stays small. `init` runs once on each new connection.
 *
 * With `named` false (Database.preparedStatements: the pool goes through a transaction-mode
 * pooler), a plain handle on `pool`: statements are parsed and planned on every call, and neither
 * `init` nor DISCARD PLANS is sent, since a session setting would land on whichever server
 * connection the pooler lent for that one statement.
 */
export function preparedKysely(
  pool: pg.Pool,
  opts: { prefix: string; refresh: PlanRefresh; named: boolean; init?: string },
): Kysely<DB> {
  if (!opts.named) return new Kysely<DB>({ dialect: new PostgresDialect({ pool }) });
  const names = new Map<string, string>();
  const nameOf = (text: string): string => {
    let n = names.get(text);
    if (n === undefined) {
      n = `${opts.prefix}${createHash('sha1').update(text).digest('hex').slice(0, 20)}`;
      if (names.size < 2_000) names.set(text, n);
    }
    return n;
  };
  const wrapped = new WeakMap<pg.PoolClient, { client: pg.PoolClient; generation: number }>();
  const wrap = (client: pg.PoolClient, generation: number): pg.PoolClient => {
    const query = (text: string, values?: unknown[]) =>
      values && values.length > 0 ? client.query({ name: nameOf(text), text, values }) : client.query(text, values);
    const w = new Proxy(client, {
      get(target, prop, receiver) {
        if (prop === 'query') return query;
        const v: unknown = Reflect.get(target, prop, receiver);
        return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
      },
    });
    wrapped.set(client, { client: w, generation });
    return w;
  };
  const facade = {
    connect: async () => {
      const client = await pool.connect();
      const generation = opts.refresh.current();
      const known = wrapped.get(client);
      try {
        if (!known) {
          if (opts.init) await client.query(opts.init);
          return wrap(client, generation);
        }
        if (known.generation !== generation) {
          await client.query('discard plans');
          known.generation = generation;
        }
        return known.client;
      } catch (e) {
        client.release(e instanceof Error ? e : true);
        throw e;
      }
    },
    end: async () => undefined,
    get options() {
      return pool.options;
    },
    get Client() {
      return (pool as unknown as { Client: unknown }).Client;
    },
  };
  return new Kysely<DB>({ dialect: new PostgresDialect({ pool: facade as unknown as pg.Pool }) });
}
