import type pg from 'pg';

type QueryFn = (...args: unknown[]) => unknown;

/**
 * Makes `client`'s promise-returning queries (a query without a callback, as Kysely and every
 * repository issue them) through pg's callback form, under a plain promise. What the caller gets
 * is the same: the result, or pg's error with its SQLSTATE. A query given a callback, or a query
 * object of its own (a cursor), goes to pg unchanged.
 *
 * pg's promise form kept what each query produced (its rows, its parameters, the Query itself)
 * alive past the young-generation collection that should have freed it, and the next one promoted
 * it into the old generation, where it waited for a full collection. Measured with pg 8.23 on
 * Node.js 24: four connections repeating a 40-row query kept 17–19 MB through every scavenge in
 * the promise form and nothing in the callback form (0.0 MB), and through Kysely and the pool
 * the callback form cut the loop's GC pauses from 678 to 214 ms while it read 21 % more rows.
 * In the worker every claimed step and every result passes through such queries: those scavenges
 * were the pauses that held back another tenant's claim (README, "Why the worker paused for
 * garbage collection").
 */
export function queryThroughCallbacks(client: pg.ClientBase): void {
  const query = client.query.bind(client) as QueryFn;
  const viaCallback: QueryFn = (...args) => {
    const [config, values] = args;
    if (args.length > 2 || typeof values === 'function' || isQueryObject(config)) return query(...args);
    return new Promise((resolve, reject) => {
      query(config, values, (err: Error | null, res: unknown) => (err ? reject(err) : resolve(res)));
    });
  };
  client.query = viaCallback as typeof client.query;
}

/** A query object of its own (it submits itself, as pg-cursor does). */
function isQueryObject(config: unknown): boolean {
  return typeof config === 'object' && config !== null && typeof (config as { submit?: unknown }).submit === 'function';
}
