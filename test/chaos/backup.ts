import { execFile, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { freePort, guard, sleep } from './cluster';

/**
 * The backup drill's PostgreSQL: the system's PostgreSQL 15 binaries (pg_basebackup, pg_dump and
 * pg_restore are not in the embedded package), a primary that archives its WAL, its base backups,
 * and servers restored from them. Everything listens on 127.0.0.1 on free ports, in temporary
 * directories the guard removes; run as root, the binaries run as the `postgres` user.
 */

export const PG15_BIN = process.env.ORDO_DRILL_PG_BIN ?? '/usr/lib/postgresql/15/bin';
const asRoot = process.getuid?.() === 0;
const TOOLS = [
  'initdb',
  'pg_ctl',
  'postgres',
  'pg_basebackup',
  'pg_verifybackup',
  'pg_dump',
  'pg_dumpall',
  'pg_restore',
  'psql',
];

/** Fails, naming what is missing, when the PostgreSQL 15 binaries are not there: the drill never skips. */
export function requirePostgres15(): void {
  const missing = TOOLS.filter((t) => !fs.existsSync(path.join(PG15_BIN, t)));
  if (missing.length > 0)
    throw new Error(
      `the backup drill needs the PostgreSQL 15 binaries in ${PG15_BIN} (ORDO_DRILL_PG_BIN): missing ${missing.join(', ')} ` +
        '(Debian: apt-get install postgresql-15)',
    );
  const version = execFileSync(path.join(PG15_BIN, 'postgres'), ['--version'], { encoding: 'utf8' });
  if (!/\b15\./.test(version))
    throw new Error(`the backup drill needs PostgreSQL 15; ${PG15_BIN} has ${version.trim()}`);
}

function command(bin: string, args: string[]): [string, string[]] {
  const exe = path.join(PG15_BIN, bin);
  return asRoot ? ['runuser', ['-u', 'postgres', '--', exe, ...args]] : [exe, args];
}

/** Runs a PostgreSQL binary (as `postgres` when root); its output, or an error carrying its stderr. */
export function pgTool(bin: string, args: string[], opts: { timeoutMs?: number } = {}): string {
  const [cmd, argv] = command(bin, args);
  try {
    return execFileSync(cmd, argv, {
      stdio: ['ignore', 'pipe', 'pipe'],
      encoding: 'utf8',
      timeout: opts.timeoutMs ?? 300_000,
      maxBuffer: 64 * 1024 * 1024,
    });
  } catch (e) {
    const err = e as Error & { stderr?: string };
    throw new Error(`${bin} ${args.join(' ')}: ${err.message}\n${err.stderr ?? ''}`);
  }
}

/** pgTool without blocking the event loop (the workload goes on while a backup runs). */
export function pgToolAsync(bin: string, args: string[], opts: { timeoutMs?: number } = {}): Promise<string> {
  const [cmd, argv] = command(bin, args);
  return new Promise((resolve, reject) =>
    execFile(
      cmd,
      argv,
      { encoding: 'utf8', timeout: opts.timeoutMs ?? 300_000, maxBuffer: 64 * 1024 * 1024 },
      (err, stdout, stderr) =>
        err ? reject(new Error(`${bin} ${args.join(' ')}: ${err.message}\n${stderr}`)) : resolve(stdout),
    ),
  );
}

/** A directory the `postgres` user can write into (mode 0700 for data directories is set by PostgreSQL's tools). */
export function drillDir(prefix: string): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  guard({ rm: dir });
  if (asRoot) fs.chmodSync(dir, 0o777);
  return dir;
}

/** Makes `dir` (new, empty) owned by the `postgres` user when root. */
export function ownDir(dir: string): void {
  fs.mkdirSync(dir, { recursive: true });
  if (asRoot) execFileSync('chown', ['postgres:postgres', dir]);
}

export function dirBytes(dir: string): number {
  let n = 0;
  for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) n += dirBytes(p);
    else if (e.isFile()) n += fs.statSync(p).size;
  }
  return n;
}

export interface ServerOptions {
  /** Archive every finished WAL segment into this directory (archive_mode = on). */
  archiveDir?: string;
}

/** One PostgreSQL 15 server in its own directory: `data/`, `pg.log`. */
export class Pg15 {
  readonly dataDir: string;
  readonly logFile: string;
  port = 0;

  constructor(
    readonly dir: string,
    readonly name: string,
  ) {
    this.dataDir = path.join(dir, name);
    this.logFile = path.join(dir, `${name}.log`);
    guard({ pg: this.dataDir, stop: command('pg_ctl', ['-D', this.dataDir, '-m', 'immediate', '-w', 'stop']).flat() });
  }

  url(db = 'ordo'): string {
    return `postgres://postgres@127.0.0.1:${this.port}/${db}`;
  }

  get ownerUrl(): string {
    return this.url('ordo');
  }

  /** A new cluster with the settings WAL archiving needs, and the database `ordo`. */
  async init(opts: ServerOptions = {}): Promise<void> {
    this.port = await freePort();
    pgTool('initdb', ['-D', this.dataDir, '-U', 'postgres', '--auth=trust', '--encoding=UTF8', '--no-locale', '-N']);
    const archive = opts.archiveDir
      ? [
          'archive_mode = on',
          // Copy under a temporary name, then rename: the archive never holds a partial segment,
          // and a segment already archived is never overwritten.
          `archive_command = 'test ! -f ${opts.archiveDir}/%f && cp %p ${opts.archiveDir}/%f.tmp && mv ${opts.archiveDir}/%f.tmp ${opts.archiveDir}/%f'`,
          'archive_timeout = 60',
        ]
      : [];
    this.appendConf([
      `port = ${this.port}`,
      `listen_addresses = '127.0.0.1'`,
      `unix_socket_directories = ''`,
      'max_connections = 200',
      'shared_buffers = 64MB',
      'wal_level = replica',
      'max_wal_senders = 4',
      ...archive,
      'log_min_messages = warning',
    ]);
    this.start();
    await this.query('postgres', 'create database ordo');
  }

  appendConf(lines: string[]): void {
    fs.appendFileSync(path.join(this.dataDir, 'postgresql.conf'), `\n${lines.join('\n')}\n`);
  }

  start(): void {
    pgTool('pg_ctl', ['-D', this.dataDir, '-l', this.logFile, '-w', '-t', '300', 'start']);
  }

  stop(mode: 'fast' | 'immediate' = 'fast'): void {
    pgTool('pg_ctl', ['-D', this.dataDir, '-m', mode, '-w', '-t', '60', 'stop']);
  }

  /** A lost machine: SIGKILL to the postmaster and every process it started, no shutdown of any kind. */
  kill(): number {
    const pidFile = path.join(this.dataDir, 'postmaster.pid');
    const pm = Number(fs.readFileSync(pidFile, 'utf8').split('\n')[0]);
    const victims = [pm, ...childrenOf(pm)];
    for (const pid of victims) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // Exited meanwhile.
      }
    }
    return victims.length;
  }

  async query<R extends pg.QueryResultRow = Record<string, unknown>>(
    db: string,
    text: string,
    values: unknown[] = [],
  ): Promise<R[]> {
    const c = new pg.Client({ connectionString: this.url(db), application_name: 'drill' });
    c.on('error', () => undefined);
    await c.connect();
    try {
      return (await c.query<R>(text, values)).rows;
    } finally {
      await c.end().catch(() => undefined);
    }
  }

  tailLog(): string {
    try {
      return fs.readFileSync(this.logFile, 'utf8').slice(-3000);
    } catch {
      return '';
    }
  }
}

function childrenOf(ppid: number): number[] {
  const out: number[] = [];
  for (const e of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(e)) continue;
    try {
      // The command name (field 2) is in parentheses and may hold spaces: the fields after it are split.
      const stat = fs.readFileSync(`/proc/${e}/stat`, 'utf8');
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      if (Number(fields[1]) === ppid) out.push(Number(e));
    } catch {
      // Exited meanwhile.
    }
  }
  return out;
}

/**
 * `pg_basebackup` of `server` into `dest` (plain format, the WAL it needs streamed alongside, a fast
 * checkpoint, a manifest), then `pg_verifybackup` of the copy.
 */
export async function baseBackup(server: Pg15, dest: string): Promise<void> {
  ownDir(dest);
  await pgToolAsync('pg_basebackup', [
    '-h',
    '127.0.0.1',
    '-p',
    String(server.port),
    '-U',
    'postgres',
    '-D',
    dest,
    '-Fp',
    '-X',
    'stream',
    '-c',
    'fast',
    '--label',
    'ordo-drill',
  ]);
  await pgToolAsync('pg_verifybackup', ['-n', dest]);
}

/** The WAL segment `pg_switch_wal` just closed, once the archiver has copied it (bounded). */
export async function switchAndArchive(server: Pg15, archiveDir: string, timeoutMs = 60_000): Promise<string> {
  const [{ file }] = await server.query<{ file: string }>('ordo', 'select pg_walfile_name(pg_switch_wal()) as file');
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const [s] = await server.query<{ last: string | null; failed: string | null }>(
      'postgres',
      'select last_archived_wal as last, last_failed_wal as failed from pg_stat_archiver',
    );
    if (s.last !== null && s.last >= file && fs.existsSync(path.join(archiveDir, file))) return file;
    if (Date.now() > deadline)
      throw new Error(`WAL segment ${file} not archived in ${timeoutMs} ms (last ${s.last}, failed ${s.failed})`);
    await sleep(100);
  }
}

export interface RecoveryTarget {
  /** A restore point made with pg_create_restore_point; unset: to the end of the archive. */
  name?: string;
}

/**
 * A new server from a base backup and the WAL archive: the backup copied into a fresh data
 * directory, `restore_command` reading the archive, `recovery.signal`, the target if any; started
 * on a new port and waited for until recovery has ended and it has been promoted (bounded).
 */
export async function restoreFromArchive(
  backupDir: string,
  archiveDir: string,
  target: RecoveryTarget,
  into: Pg15,
  timeoutMs = 300_000,
): Promise<void> {
  ownDir(into.dataDir);
  asPostgres('cp', ['-a', `${backupDir}/.`, into.dataDir]);
  fs.chmodSync(into.dataDir, 0o700);
  into.port = await freePort();
  into.appendConf([
    `port = ${into.port}`,
    // The restored server is a new primary: it does not write into the old one's archive.
    'archive_mode = off',
    `restore_command = 'cp ${archiveDir}/%f %p'`,
    ...(target.name ? [`recovery_target_name = '${target.name}'`] : []),
    `recovery_target_action = 'promote'`,
  ]);
  fs.writeFileSync(path.join(into.dataDir, 'recovery.signal'), '');
  if (asRoot) execFileSync('chown', ['postgres:postgres', path.join(into.dataDir, 'recovery.signal')]);
  into.start();
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      const [r] = await into.query<{ recovering: boolean }>('postgres', 'select pg_is_in_recovery() as recovering');
      if (!r.recovering) return;
    } catch {
      // Not accepting connections yet.
    }
    if (Date.now() > deadline)
      throw new Error(`restored server still in recovery after ${timeoutMs} ms:\n${into.tailLog()}`);
    await sleep(100);
  }
}

/** A command that is not a PostgreSQL binary, as the `postgres` user when root. */
export function asPostgres(cmd: string, args: string[]): string {
  const [c, argv] = asRoot ? ['runuser', ['-u', 'postgres', '--', cmd, ...args]] : [cmd, args];
  return execFileSync(c, argv, { stdio: ['ignore', 'pipe', 'pipe'], encoding: 'utf8', timeout: 300_000 });
}

/**
 * The small-install form: Ordo's login roles (`pg_dumpall --roles-only`: they belong to the server,
 * not to the database) and the database (`pg_dump -Fc`), written into `dir`.
 */
export async function dumpLogical(server: Pg15, dir: string): Promise<void> {
  ownDir(dir);
  const base = ['-h', '127.0.0.1', '-p', String(server.port), '-U', 'postgres'];
  await pgToolAsync('pg_dumpall', [...base, '--roles-only', '-f', path.join(dir, 'roles.sql')]);
  await pgToolAsync('pg_dump', [...base, '-Fc', '-f', path.join(dir, 'ordo.dump'), 'ordo']);
}

/**
 * A dump restored into a new, empty server: the roles first (that `postgres` exists already is the
 * one expected error), then the database and its contents, stopping at any error.
 */
export async function restoreLogical(dir: string, into: Pg15): Promise<void> {
  await into.init();
  const base = ['-h', '127.0.0.1', '-p', String(into.port), '-U', 'postgres'];
  await pgToolAsync('psql', [...base, '-q', '-f', path.join(dir, 'roles.sql'), 'postgres']);
  await pgToolAsync('pg_restore', [...base, '-d', 'ordo', '--exit-on-error', path.join(dir, 'ordo.dump')]);
}
