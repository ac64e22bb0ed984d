/**
 * A load on the database server that is not Ordo's: the fairness benchmark's control. Each session
 * repeats one durable transaction: a counter row updated and six rows of about 500 bytes inserted
 * into an indexed table, after counting `work` numbers (CPU held in the statement, as the busy
 * tenant's batched statements hold it), then pauses `pauseMs`. With `work` 0 the transactions are
 * short and wait mostly for their WAL flush. None of Ordo's queues, workers or notifications take
 * part, so the quiet tenant's claim latency measured meanwhile is what the host does to it under a
 * load of that kind; beside its latency under the busy tenant's drain, it tells the host's share
 * from Ordo's.
 *
 * Started with fork(); argv: <connection URL> <sessions> <work> <pauseMs>. The tables
 * (bench_control_counter, bench_control_row) exist already. 'ready' is sent once every session is
 * connected; a 'stop' message ends the load and is answered with the count of committed transactions.
 */
import pg from 'pg';

const COUNTERS = 10_000;

async function main(): Promise<void> {
  const [url, n, w, p] = process.argv.slice(2);
  const work = Number(w);
  const pauseMs = Number(p);
  const clients = await Promise.all(
    Array.from({ length: Number(n) }, async () => {
      const c = new pg.Client({ connectionString: url, application_name: 'ordo:bench-control' });
      c.on('error', () => process.exit(1));
      await c.connect();
      return c;
    }),
  );
  let stopping = false;
  let committed = 0;
  const loop = async (c: pg.Client, k: number) => {
    let id = k;
    while (!stopping) {
      id = (id + 7919) % COUNTERS;
      await c.query(
        `with u as (update bench_control_counter set n = n + 1 where id = $1 returning id),
           w as (select count(*) as n from generate_series(1, $2::integer) g where g % 7 = 3)
         insert into bench_control_row (k, pad) select u.id, repeat('x', 500) from u, w, generate_series(1, 6)`,
        [id, work],
      );
      committed++;
      if (pauseMs > 0) await new Promise((r) => setTimeout(r, pauseMs));
    }
  };
  process.on('message', (m) => {
    if (m === 'stop') stopping = true;
  });
  process.send?.('ready');
  await Promise.all(clients.map((c, k) => loop(c, k)));
  await Promise.all(clients.map((c) => c.end()));
  process.send?.(committed, () => process.exit(0));
}

void main().catch(() => process.exit(1));
