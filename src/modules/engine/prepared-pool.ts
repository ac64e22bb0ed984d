import { createHash } from 'node:crypto';
import { Kysely, PostgresDialect } from 'kysely';
import type pg from 'pg';
import type { DB } from '../../core/database/db.generated';
import type { SystemDb } from '../../core/database/handles';

type QueryFn = (text: string, values?: unknown[]) => Promise<pg.QueryResult>;

/**
 * The engine's system handle: the same pool as `Database.system`, but every parameterised
 * statement is sent as a named prepared statement (name = hash of its text), so PostgreSQL parses
 * and plans each of the engine's statements once per connection instead of on every cycle. Only
 * the engine's own statements go through it: their texts are fixed (bulk parameters are arrays),
 * so the set of prepared statements per connection stays small.
 */
export function preparedSystemDb(pool: pg.Pool): SystemDb {
  const wrapped = new WeakMap<pg.PoolClient, pg.PoolClient>();
  const names = new Map<string, string>();
  const nameOf = (text: string): string => {
    let n = names.get(text);
    if (n === undefined) {
      n = `ordo_e_${createHash('sha1').update(text).digest('hex').slice(0, 20)}`;
      if (names.size < 2_000) names.set(text, n);
    }
    return n;
  };
  const wrap = (client: pg.PoolClient): pg.PoolClient => {
    let w = wrapped.get(client);
    if (w) return w;
    const query: QueryFn = (text, values) =>
      values && values.length > 0 ? client.query({ name: nameOf(text), text, values }) : client.query(text, values);
    w = new Proxy(client, {
      get(target, prop, receiver) {
        if (prop === 'query') return query;
        const v: unknown = Reflect.get(target, prop, receiver);
        return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
      },
    });
    wrapped.set(client, w);
    return w;
  };
  const facade = {
    connect: async () => {
      const client = await pool.connect();
      if (!wrapped.has(client))
        // Plans follow the tables as they grow: a generic plan made while they were small would stay.
        await client.query('set plan_cache_mode = force_custom_plan').catch((e: unknown) => {
          client.release(e instanceof Error ? e : true);
          throw e;
        });
      return wrap(client);
    },
    end: async () => undefined,
    get options() {
      return pool.options;
    },
    get Client() {
      return (pool as unknown as { Client: unknown }).Client;
    },
  };
  return new Kysely<DB>({
    dialect: new PostgresDialect({ pool: facade as unknown as pg.Pool }),
  }) as SystemDb;
}
