/**
 * A listening session in a process of its own, idle but for this: it LISTENs on `ordo_ready` and
 * notes when each wake-up for one tenant arrives (Unix ms). The fairness benchmark compares these
 * with the quiet runs' creation and claim times: the worker's process is busy with the drain, this
 * one is not, so the difference between the two says how much of the claim latency the worker's
 * own handling adds, and what remains is PostgreSQL's (the creating commit, the notification).
 *
 * Started with fork(); argv: <connection URL> <tenant>. Answers a 'take' message with the arrivals
 * so far (and forgets them); 'ready' is sent once it listens.
 */
import { performance } from 'node:perf_hooks';
import pg from 'pg';

async function main(): Promise<void> {
  const [url, tenant] = process.argv.slice(2);
  const client = new pg.Client({ connectionString: url, application_name: 'ordo:bench-probe' });
  let arrivals: number[] = [];
  client.on('notification', (n) => {
    if (n.channel === 'ordo_ready' && n.payload === tenant) arrivals.push(performance.timeOrigin + performance.now());
  });
  client.on('error', () => process.exit(1));
  await client.connect();
  await client.query('listen ordo_ready');
  process.on('message', (m) => {
    if (m === 'take') {
      process.send?.(arrivals);
      arrivals = [];
    } else if (m === 'stop') void client.end().finally(() => process.exit(0));
  });
  process.send?.('ready');
}

void main().catch(() => process.exit(1));
