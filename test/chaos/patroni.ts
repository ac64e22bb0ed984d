import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { freePort, guard, sleep } from './cluster';

/**
 * A two-node Patroni cluster on 127.0.0.1 for the chaos harness: one etcd, two Patroni nodes
 * (Debian's `patroni`, PostgreSQL 15 from /usr/lib/postgresql/15/bin) in synchronous mode, and an
 * HAProxy in front that sends every connection to the node whose Patroni answers `GET /primary`
 * 200. Ordo connects to HAProxy only (`ownerUrl`). Everything lives in one temporary directory;
 * the guard (cluster.ts) kills the processes and stops both PostgreSQL servers however the harness ends.
 *
 * The settings that matter (docs/ha.md explains them): `synchronous_mode: true` with
 * `synchronous_commit: on`, so a COMMIT returns only once the standby has flushed its WAL and
 * Patroni promotes only that standby; `synchronous_mode_strict: false`, so the survivor of a
 * two-node cluster takes writes alone; short `ttl`/`loop_wait` so a hard failover fits in a test.
 */

const PG_BIN = '/usr/lib/postgresql/15/bin';
const SCOPE = 'ordo-chaos';
const asRoot = process.getuid?.() === 0;

export type NodeName = 'node1' | 'node2';

interface Member {
  name: string;
  role: string;
  state: string;
  lag?: number | string;
  timeline?: number;
}

export interface PatroniTimings {
  /** Leader key timeout (s): a primary whose Patroni is gone loses the leader key after at most this. */
  ttl: number;
  loopWait: number;
  retryTimeout: number;
}

/** The packages the cluster needs; missing ones are named (`.ci/run` installs them). */
export function patroniMissing(): string[] {
  const missing: string[] = [];
  const has = (cmd: string) => {
    try {
      execFileSync('sh', ['-c', `command -v ${cmd}`], { stdio: 'ignore' });
      return true;
    } catch {
      return false;
    }
  };
  if (!has('patroni')) missing.push('patroni');
  if (!has('etcd')) missing.push('etcd-server');
  if (!has('haproxy')) missing.push('haproxy');
  if (!fs.existsSync(path.join(PG_BIN, 'postgres'))) missing.push('postgresql-15');
  return missing;
}

interface PatroniNode {
  name: NodeName;
  pgPort: number;
  restPort: number;
  dir: string;
  dataDir: string;
  config: string;
  child?: ChildProcess;
}

function postgresIds(): { uid: number; gid: number } {
  const id = (flag: string) => Number(execFileSync('id', [flag, 'postgres'], { encoding: 'utf8' }).trim());
  return { uid: id('-u'), gid: id('-g') };
}

export class PatroniCluster {
  readonly dir: string;
  private readonly nodes: PatroniNode[] = [];
  private etcdPort = 0;
  private etcdPeerPort = 0;
  private haproxyPort = 0;
  private readonly children: ChildProcess[] = [];
  private readonly logs = new Map<string, string>();

  constructor(readonly timings: PatroniTimings = { ttl: 10, loopWait: 1, retryTimeout: 4 }) {
    this.dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ordo-chaos-patroni-'));
    // PostgreSQL runs as `postgres`: it must reach and write its node directories.
    fs.chmodSync(this.dir, 0o755);
    guard({ rm: this.dir });
  }

  /** The owner connection through HAProxy: always the current primary. */
  get ownerUrl(): string {
    return `postgres://postgres@127.0.0.1:${this.haproxyPort}/ordo`;
  }

  get adminUrl(): string {
    return `postgres://postgres@127.0.0.1:${this.haproxyPort}/postgres`;
  }

  /** etcd, both nodes (node1 bootstraps, node2 clones it), HAProxy; resolves once node2 is the synchronous standby. */
  async start(): Promise<void> {
    this.etcdPort = await freePort();
    this.etcdPeerPort = await freePort();
    this.haproxyPort = await freePort();
    for (const name of ['node1', 'node2'] as const) {
      const dir = path.join(this.dir, name);
      fs.mkdirSync(dir, { mode: 0o700 });
      const node: PatroniNode = {
        name,
        pgPort: await freePort(),
        restPort: await freePort(),
        dir,
        dataDir: path.join(dir, 'data'),
        config: path.join(dir, 'patroni.yml'),
      };
      this.writeConfig(node);
      if (asRoot) {
        const { uid, gid } = postgresIds();
        fs.chownSync(dir, uid, gid);
        fs.chownSync(node.config, uid, gid);
      }
      const stop = [path.join(PG_BIN, 'pg_ctl'), '-D', node.dataDir, '-m', 'immediate', '-w', 'stop'];
      guard({ pg: node.dataDir, stop: asRoot ? ['runuser', '-u', 'postgres', '--', ...stop] : stop });
      this.nodes.push(node);
    }
    this.startEtcd();
    await this.waitFor('etcd healthy', 30_000, async () => {
      const r = await get(`http://127.0.0.1:${this.etcdPort}/health`);
      return r?.status === 200;
    });
    this.startNode('node1');
    await this.waitFor('node1 leader', 90_000, async () => (await this.member('node1'))?.role === 'leader');
    this.startNode('node2');
    this.startHaproxy();
    await this.waitSynchronous('node1', 'node2', 120_000);
    const c = new pg.Client({ connectionString: this.adminUrl });
    await c.connect();
    await c.query('create database ordo');
    await c.end();
  }

  private writeConfig(n: PatroniNode): void {
    const t = this.timings;
    const yaml = `scope: ${SCOPE}
namespace: /ordo-chaos/
name: ${n.name}
log:
  level: WARNING
restapi:
  listen: 127.0.0.1:${n.restPort}
  connect_address: 127.0.0.1:${n.restPort}
etcd3:
  hosts: 127.0.0.1:${this.etcdPort}
bootstrap:
  dcs:
    ttl: ${t.ttl}
    loop_wait: ${t.loopWait}
    retry_timeout: ${t.retryTimeout}
    maximum_lag_on_failover: 1048576
    synchronous_mode: true
    synchronous_mode_strict: false
    postgresql:
      use_pg_rewind: true
      use_slots: true
      parameters:
        synchronous_commit: 'on'
        wal_level: replica
        hot_standby: 'on'
        wal_log_hints: 'on'
        max_connections: 300
        max_wal_senders: 5
        max_replication_slots: 5
        shared_buffers: 128MB
        log_min_messages: warning
  initdb:
    - encoding: UTF8
    - no-locale
  pg_hba:
    - host replication replicator 127.0.0.1/32 trust
    - host all all 127.0.0.1/32 trust
postgresql:
  listen: 127.0.0.1:${n.pgPort}
  connect_address: 127.0.0.1:${n.pgPort}
  data_dir: ${n.dataDir}
  bin_dir: ${PG_BIN}
  pgpass: ${path.join(n.dir, 'pgpass')}
  authentication:
    superuser:
      username: postgres
    replication:
      username: replicator
    rewind:
      username: postgres
  parameters:
    unix_socket_directories: '${n.dir}'
`;
    fs.writeFileSync(n.config, yaml);
  }

  private spawnLogged(name: string, cmd: string, args: string[], asPostgres: boolean): ChildProcess {
    const ids = asPostgres && asRoot ? postgresIds() : undefined;
    const child = spawn(cmd, args, {
      cwd: this.dir,
      env: { PATH: process.env.PATH, HOME: this.dir, LANG: 'C.UTF-8' },
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true,
      ...(ids ? { uid: ids.uid, gid: ids.gid } : {}),
    });
    if (child.pid) guard({ group: child.pid, marker: this.dir });
    const keep = (d: Buffer) => this.logs.set(name, ((this.logs.get(name) ?? '') + d.toString()).slice(-4000));
    child.stdout?.on('data', keep);
    child.stderr?.on('data', keep);
    child.once('exit', () => {
      if (child.pid) guard({ exited: child.pid });
    });
    this.children.push(child);
    return child;
  }

  private startEtcd(): void {
    const peer = `http://127.0.0.1:${this.etcdPeerPort}`;
    const client = `http://127.0.0.1:${this.etcdPort}`;
    this.spawnLogged(
      'etcd',
      'etcd',
      [
        '--name=chaos',
        `--data-dir=${path.join(this.dir, 'etcd')}`,
        `--listen-client-urls=${client}`,
        `--advertise-client-urls=${client}`,
        `--listen-peer-urls=${peer}`,
        `--initial-advertise-peer-urls=${peer}`,
        `--initial-cluster=chaos=${peer}`,
        '--log-level=error',
      ],
      false,
    );
  }

  private startNode(name: NodeName): void {
    const n = this.node(name);
    n.child = this.spawnLogged(name, 'patroni', [n.config], true);
  }

  private startHaproxy(): void {
    const servers = this.nodes
      .map((n) => `  server ${n.name} 127.0.0.1:${n.pgPort} maxconn 500 check port ${n.restPort}`)
      .join('\n');
    const cfg = `global
  maxconn 1000
defaults
  mode tcp
  retries 2
  timeout connect 2s
  timeout client 30m
  timeout server 30m
  timeout check 2s
listen postgres_primary
  bind 127.0.0.1:${this.haproxyPort}
  option httpchk
  http-check send meth GET uri /primary
  http-check expect status 200
  default-server inter 500ms fall 2 rise 1 on-marked-down shutdown-sessions
${servers}
`;
    const file = path.join(this.dir, 'haproxy.cfg');
    fs.writeFileSync(file, cfg);
    this.spawnLogged('haproxy', 'haproxy', ['-db', '-f', file], false);
  }

  private node(name: NodeName): PatroniNode {
    return this.nodes.find((n) => n.name === name)!;
  }

  other(name: NodeName): NodeName {
    return name === 'node1' ? 'node2' : 'node1';
  }

  /** The members as the DCS has them, asked of any Patroni still answering. */
  async members(): Promise<Member[]> {
    for (const n of this.nodes) {
      const r = await get(`http://127.0.0.1:${n.restPort}/cluster`);
      if (r?.status === 200) return (JSON.parse(r.body) as { members: Member[] }).members;
    }
    return [];
  }

  private async member(name: NodeName): Promise<Member | undefined> {
    return (await this.members()).find((m) => m.name === name);
  }

  async leader(): Promise<NodeName> {
    const m = (await this.members()).find((x) => x.role === 'leader');
    if (!m) throw new Error('the Patroni cluster has no leader');
    return m.name as NodeName;
  }

  /** `primary` leads, `standby` is its synchronous standby and running, and HAProxy reaches the primary. */
  async waitSynchronous(primary: NodeName, standby: NodeName, timeoutMs: number): Promise<void> {
    await this.waitFor(`${primary} leader with ${standby} its synchronous standby`, timeoutMs, async () => {
      const ms = await this.members();
      const p = ms.find((m) => m.name === primary);
      const s = ms.find((m) => m.name === standby);
      return p?.role === 'leader' && s?.role === 'sync_standby' && s.state === 'running';
    });
    await this.waitWritable(timeoutMs);
  }

  /** Until a connection through HAProxy lands on a server that takes writes. */
  async waitWritable(timeoutMs: number): Promise<void> {
    await this.waitFor('a writable primary behind HAProxy', timeoutMs, async () => {
      const c = new pg.Client({ connectionString: this.adminUrl, connectionTimeoutMillis: 1_000 });
      c.on('error', () => undefined);
      try {
        await c.connect();
        const r = await c.query<{ ro: string }>("select current_setting('transaction_read_only') as ro");
        return r.rows[0].ro === 'off';
      } finally {
        await c.end().catch(() => undefined);
      }
    });
  }

  /**
   * A planned switchover through Patroni's REST API: the primary shuts down cleanly, the
   * synchronous standby is promoted, the old primary follows it. Resolves with the time (ms) until
   * HAProxy reaches a writable primary again; `synced` resolves once the old primary is the new
   * primary's synchronous standby.
   */
  async switchover(): Promise<{ from: NodeName; to: NodeName; writableMs: number; synced: Promise<number> }> {
    const t0 = Date.now();
    const from = await this.leader();
    const to = this.other(from);
    const r = await post(`http://127.0.0.1:${this.node(from).restPort}/switchover`, { leader: from, candidate: to });
    if (r?.status !== 200) throw new Error(`switchover ${from} → ${to}: ${r?.status} ${r?.body}`);
    await this.waitFor(`${to} leader`, 60_000, async () => (await this.member(to))?.role === 'leader');
    await this.waitWritable(60_000);
    const writableMs = Date.now() - t0;
    const synced = this.waitSynchronous(to, from, 120_000).then(() => Date.now() - t0);
    return { from, to, writableMs, synced };
  }

  /**
   * The primary's node dies: its Patroni is SIGKILLed first (else it would restart PostgreSQL),
   * then its postmaster and every PostgreSQL process under it. The standby takes the leader key once
   * it expires (`ttl`) and promotes itself. Resolves with the time (ms) until HAProxy reaches a
   * writable primary again.
   */
  async killPrimary(): Promise<{ killed: NodeName; to: NodeName; writableMs: number }> {
    const t0 = Date.now();
    const killed = await this.leader();
    const to = this.other(killed);
    const n = this.node(killed);
    const postmaster = Number(fs.readFileSync(path.join(n.dataDir, 'postmaster.pid'), 'utf8').split('\n')[0]);
    const backends = childrenOf(postmaster);
    if (n.child?.pid) process.kill(-n.child.pid, 'SIGKILL');
    for (const pid of [postmaster, ...backends]) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // Gone already.
      }
    }
    await this.waitFor(`${to} promoted`, 120_000, async () => (await this.member(to))?.role === 'leader');
    await this.waitWritable(60_000);
    return { killed, to, writableMs: Date.now() - t0 };
  }

  /** Starts the dead node's Patroni again: it rewinds if it must and follows the primary; resolves (ms) once it is the synchronous standby. */
  async rejoin(name: NodeName): Promise<number> {
    const t0 = Date.now();
    this.startNode(name);
    await this.waitSynchronous(this.other(name), name, 180_000);
    return Date.now() - t0;
  }

  private async waitFor(what: string, timeoutMs: number, ok: () => Promise<boolean>): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    let last = '';
    for (;;) {
      try {
        if (await ok()) return;
      } catch (e) {
        last = (e as Error).message;
      }
      if (Date.now() > deadline)
        throw new Error(
          `Patroni cluster: ${what} not reached in ${timeoutMs} ms (last error: ${last})\n${this.logTail()}`,
        );
      await sleep(200);
    }
  }

  logTail(): string {
    return [...this.logs].map(([k, v]) => `--- ${k}\n${v.slice(-1500)}`).join('\n');
  }

  /** Kills Patroni, etcd and HAProxy, stops both PostgreSQL servers (immediate), removes the directory. */
  destroy(): void {
    for (const c of this.children) {
      if (c.pid && c.exitCode === null && c.signalCode === null) {
        try {
          process.kill(-c.pid, 'SIGKILL');
        } catch {
          // Exited meanwhile.
        }
      }
    }
    for (const n of this.nodes) {
      if (!fs.existsSync(path.join(n.dataDir, 'postmaster.pid'))) continue;
      const stop = ['-D', n.dataDir, '-m', 'immediate', '-w', 'stop'];
      try {
        if (asRoot)
          execFileSync('runuser', ['-u', 'postgres', '--', path.join(PG_BIN, 'pg_ctl'), ...stop], { stdio: 'ignore' });
        else execFileSync(path.join(PG_BIN, 'pg_ctl'), stop, { stdio: 'ignore' });
      } catch {
        // Not running.
      }
    }
    fs.rmSync(this.dir, { recursive: true, force: true });
  }
}

/** The direct children of `pid` (from /proc). */
function childrenOf(pid: number): number[] {
  const out: number[] = [];
  for (const d of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const status = fs.readFileSync(`/proc/${d}/status`, 'utf8');
      if (new RegExp(`^PPid:\\s+${pid}$`, 'm').test(status)) out.push(Number(d));
    } catch {
      // Exited meanwhile.
    }
  }
  return out;
}

async function get(url: string): Promise<{ status: number; body: string } | null> {
  try {
    const r = await fetch(url, { signal: AbortSignal.timeout(2_000) });
    return { status: r.status, body: await r.text() };
  } catch {
    return null;
  }
}

async function post(url: string, body: unknown): Promise<{ status: number; body: string } | null> {
  try {
    const r = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
      signal: AbortSignal.timeout(30_000),
    });
    return { status: r.status, body: await r.text() };
  } catch (e) {
    return { status: 0, body: (e as Error).message };
  }
}
