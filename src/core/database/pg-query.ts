import type pg from 'pg';

type QueryFn = (...args: unknown[]) => unknown;

/**
 * Makes `client`'s promise-returning queries (a query without a callback, as Kysely and every
 * repository issue them) through pg's callback form, under a plain promise. What the caller gets
 * is the same: the result, or pg's error with its SQLSTATE. A query given a callback, or a query
 * object of its own (a cursor), goes to pg unchanged.
 *
 * pg's promise form kept what each query produced (its rows, its parameters) alive through the
 * next young-generation collection, which then promoted it; the callback form keeps nothing. The
 * measurements, and how those promotions paused the worker, are in the README ("Why the worker
 * paused for garbage collection").
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

/**
 * Makes `client` send every query unnamed: a query config's `name` (a named prepared statement,
 * parsed once per connection and then only bound) is dropped, the rest goes to pg unchanged. For
 * a connection through a transaction-mode pooler, where consecutive statements may run on
 * different server connections and a name prepared on one is unknown on the next.
 */
export function withoutStatementNames(client: pg.ClientBase): void {
  const query = client.query.bind(client) as QueryFn;
  const unnamed: QueryFn = (config, ...rest) => {
    if (typeof config !== 'object' || config === null || isQueryObject(config) || !('name' in config))
      return query(config, ...rest);
    const { name: _name, ...anonymous } = config as { name?: unknown };
    return query(anonymous, ...rest);
  };
  client.query = unnamed as typeof client.query;
}
