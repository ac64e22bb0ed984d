import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import type { SandboxView } from './bwrap';
import { startEgressProxy, type EgressProxy } from './egress-proxy';
import type { Sandbox, SandboxLaunch } from './sandbox';
import { helperFile, nodeBinary } from './sandbox';

/** Directories a bare command name is looked up in (and the PATH the command sees). */
export const SAFE_PATH = ['/usr/bin', '/bin'];

/** Where a command may live: the parts of the host the sandbox shows. */
const VISIBLE = ['/usr/', '/bin/', '/sbin/', '/lib/', '/lib32/', '/lib64/', '/libx32/'];

/** Inside the sandbox: the egress socket, the forwarder and its Node, and the proxy's port. */
const RUN = '/run/ordo';
const PROXY_PORT = 3128;

export interface CliLimits {
  cpuSeconds: number;
  memoryBytes: number;
  fileSizeBytes: number;
  processes: number;
  /** Size of the private /tmp and of the working directory (each a tmpfs). */
  tmpBytes: number;
  workBytes: number;
}

export interface CliRunOptions {
  /** Absolute path of the executable (see resolveCommand). */
  command: string;
  args: readonly string[];
  /** Declared variables; the command sees only these plus PATH, HOME, LANG and the proxy variables. */
  env: Readonly<Record<string, string>>;
  stdin?: string;
  timeoutMs: number;
  /** Bytes of stdout (and of stderr) kept; the rest is counted and dropped. */
  maxOutputBytes: number;
  /** The step's egress list: empty, no network at all; else only through the checking proxy. */
  egress: readonly string[];
  limits: CliLimits;
  signal: AbortSignal;
  /** Each complete output line, as it arrives (at most `maxLogLines`). */
  onLine?(stream: 'stdout' | 'stderr', line: string): void;
  /** A line of the sandbox's own (egress denials) for the step's log. */
  log?(level: 'info' | 'warn', message: string): void;
  maxLogLines?: number;
}

export interface CliRunResult {
  exitCode: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
  truncated: boolean;
  droppedLines: number;
  timedOut: boolean;
  aborted: boolean;
  /** False when the command ran without the sandbox (ORDO_CLI_SANDBOX_REQUIRED=false). */
  sandboxed: boolean;
  /** Why the sandbox was not used, when it was not. */
  sandboxProblem?: string;
  durationMs: number;
}

export class SandboxUnavailableError extends Error {
  readonly code = 'SANDBOX_UNAVAILABLE';
}

function which(name: string): string | undefined {
  for (const dir of ['/usr/bin', '/bin', '/usr/sbin', '/sbin']) {
    const p = path.join(dir, name);
    try {
      fs.accessSync(p, fs.constants.X_OK);
      return p;
    } catch {
      // next directory
    }
  }
  return undefined;
}

/**
 * Resolves an absolute path or a bare name (looked up in SAFE_PATH) to an executable file the
 * sandbox shows (under /usr, /bin, /sbin or /lib*); anything else is not found.
 */
export function resolveCommand(command: string): string | undefined {
  const candidates = path.isAbsolute(command)
    ? [path.normalize(command)]
    : command.includes('/')
      ? []
      : SAFE_PATH.map((d) => path.join(d, command));
  for (const c of candidates) {
    if (!VISIBLE.some((dir) => c.startsWith(dir))) continue;
    try {
      fs.accessSync(c, fs.constants.X_OK);
      if (fs.statSync(c).isFile()) return c;
    } catch {
      // not here
    }
  }
  return undefined;
}

/** Keeps the last `max` bytes written to it and counts everything. */
class Tail {
  private chunks: Buffer[] = [];
  private size = 0;
  total = 0;
  constructor(private readonly max: number) {}
  push(c: Buffer) {
    this.total += c.length;
    this.chunks.push(c);
    this.size += c.length;
    while (this.size > this.max && this.chunks.length > 0) {
      const first = this.chunks[0];
      const excess = this.size - this.max;
      if (first.length <= excess) {
        this.chunks.shift();
        this.size -= first.length;
      } else {
        this.chunks[0] = first.subarray(excess);
        this.size -= excess;
      }
    }
  }
  text() {
    return Buffer.concat(this.chunks).toString('utf8');
  }
}

const MAX_LINE = 8192;

/**
 * Runs `cli` steps: each command in a bubblewrap sandbox of its own (see bwrap.ts) as an
 * unprivileged host uid (see sandbox-ids.ts), with rlimits set by prlimit inside it, a scrubbed
 * environment, size-bounded tmpfs mounts for /tmp and its working directory (/work, also HOME),
 * no shell, and every process it starts killed with it. A step without egress has no network at
 * all (a namespace with only its own loopback); a step with egress reaches the outside only
 * through the egress proxy, which checks each destination against its list (HTTP_PROXY and
 * HTTPS_PROXY point there; programs that ignore them reach nothing).
 */
export class CliRunner {
  constructor(private readonly sandbox: Sandbox) {}

  async run(o: CliRunOptions): Promise<CliRunResult> {
    const support = this.sandbox.available();
    const prlimit = which('prlimit');
    if (!support.ok && this.sandbox.settings.cliRequired) throw new SandboxUnavailableError(support.reason);
    if (support.ok && !prlimit)
      throw new SandboxUnavailableError("prlimit (util-linux) is missing: the command's limits cannot be set");
    const limits = [
      `--cpu=${o.limits.cpuSeconds}`,
      `--as=${o.limits.memoryBytes}`,
      `--fsize=${o.limits.fileSizeBytes}`,
      `--nproc=${o.limits.processes}`,
    ];
    const id = this.sandbox.ids.acquire();
    const cleanup: (() => Promise<unknown>)[] = [];
    try {
      const env: Record<string, string> = { PATH: SAFE_PATH.join(':'), HOME: '/work', LANG: 'C' };
      let launch: SandboxLaunch;
      let cwd = '/';
      if (support.ok) {
        const view: SandboxView & { readOnly: [string, string][]; readWrite: [string, string][] } = {
          tmpfs: [
            ['/tmp', o.limits.tmpBytes, 0o1777],
            ['/work', o.limits.workBytes, 0o700],
          ],
          cwd: '/work',
          readOnly: [],
          readWrite: [],
        };
        let command = [prlimit!, ...limits, '--', o.command, ...o.args];
        if (o.egress.length > 0) {
          const dir = await fs.promises.mkdtemp(path.join(this.sandbox.runtimeDir(), 'step-'));
          cleanup.push(() => fs.promises.rm(dir, { recursive: true, force: true }));
          if (id.uid !== undefined) await fs.promises.chown(dir, id.uid, id.gid!);
          await fs.promises.chmod(dir, 0o700);
          const socketPath = path.join(dir, 'egress.sock');
          const proxy: EgressProxy = await startEgressProxy({
            socketPath,
            owner: id.uid === undefined ? undefined : { uid: id.uid, gid: id.gid! },
            egress: o.egress,
            policy: this.sandbox.egress,
            log: (level, message) => o.log?.(level, message),
          });
          cleanup.unshift(() => proxy.close());
          view.readWrite.push([socketPath, `${RUN}/egress.sock`]);
          view.readOnly.push(
            [nodeBinary(), `${RUN}/node`],
            [helperFile('egress-forwarder.js'), `${RUN}/egress-forwarder.js`],
          );
          command = [`${RUN}/node`, `${RUN}/egress-forwarder.js`, `${RUN}/egress.sock`, String(PROXY_PORT), ...command];
          const proxyUrl = `http://127.0.0.1:${PROXY_PORT}`;
          Object.assign(env, {
            HTTP_PROXY: proxyUrl,
            HTTPS_PROXY: proxyUrl,
            http_proxy: proxyUrl,
            https_proxy: proxyUrl,
          });
        }
        launch = this.sandbox.launch(id, view, command);
      } else {
        // The operator's loud opt-out: no namespaces, the host's network; still an unprivileged
        // uid when Ordo runs as root, a private directory and the rlimits where prlimit works.
        const dir = await fs.promises.mkdtemp(path.join(this.sandbox.runtimeDir(), 'step-'));
        cleanup.push(() => fs.promises.rm(dir, { recursive: true, force: true }));
        if (id.uid !== undefined) await fs.promises.chown(dir, id.uid, id.gid!);
        await fs.promises.chmod(dir, 0o700);
        env.HOME = dir;
        cwd = dir;
        launch =
          prlimit !== undefined && spawnSync(prlimit, ['--', '/bin/true']).status === 0
            ? { file: prlimit, args: [...limits, '--', o.command, ...o.args], uid: id.uid, gid: id.gid }
            : { file: o.command, args: [...o.args], uid: id.uid, gid: id.gid };
      }
      const result = await execute(launch, cwd, { ...env, ...o.env }, o);
      return { ...result, sandboxed: support.ok, sandboxProblem: support.ok ? undefined : support.reason };
    } finally {
      for (const c of cleanup) await c().catch(() => undefined);
      id.release();
    }
  }
}

/** Runs one launch to its end: output tails and lines, timeout, abort, and the group killed after. */
async function execute(
  launch: SandboxLaunch,
  cwd: string,
  env: Record<string, string>,
  o: CliRunOptions,
): Promise<Omit<CliRunResult, 'sandboxed' | 'sandboxProblem'>> {
  const started = Date.now();
  const out = new Tail(o.maxOutputBytes);
  const err = new Tail(o.maxOutputBytes);
  const maxLines = o.maxLogLines ?? 1000;
  let lines = 0;
  let droppedLines = 0;
  const partial = { stdout: '', stderr: '' };
  const emit = (stream: 'stdout' | 'stderr', line: string) => {
    if (lines >= maxLines) {
      droppedLines++;
      return;
    }
    lines++;
    o.onLine?.(stream, line.length > MAX_LINE ? `${line.slice(0, MAX_LINE)}…` : line);
  };
  const feed = (stream: 'stdout' | 'stderr', c: Buffer) => {
    (stream === 'stdout' ? out : err).push(c);
    if (lines >= maxLines) {
      droppedLines += c.toString('latin1').split('\n').length - 1;
      return;
    }
    const text = partial[stream] + c.toString('utf8');
    const parts = text.split('\n');
    partial[stream] = parts.pop() ?? '';
    if (partial[stream].length > MAX_LINE) {
      parts.push(partial[stream]);
      partial[stream] = '';
    }
    for (const p of parts) emit(stream, p);
  };

  let timedOut = false;
  let aborted = false;
  const child = spawn(launch.file, launch.args, {
    cwd,
    env,
    uid: launch.uid,
    gid: launch.gid,
    detached: true,
    stdio: [o.stdin === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'],
    windowsHide: true,
  });
  const killGroup = () => {
    if (child.pid === undefined) return;
    try {
      process.kill(-child.pid, 'SIGKILL');
    } catch {
      // the group is gone already
    }
  };
  const timer = setTimeout(() => {
    timedOut = true;
    killGroup();
  }, o.timeoutMs);
  const onAbort = () => {
    aborted = true;
    killGroup();
  };
  o.signal.addEventListener('abort', onAbort, { once: true });
  if (o.signal.aborted) onAbort();
  const stdout = child.stdout!;
  const stderr = child.stderr!;
  const closed = Promise.all([
    new Promise((r) => stdout.once('close', r)),
    new Promise((r) => stderr.once('close', r)),
  ]);
  stdout.on('data', (c: Buffer) => feed('stdout', c));
  stderr.on('data', (c: Buffer) => feed('stderr', c));
  if (o.stdin !== undefined && child.stdin) {
    child.stdin.on('error', () => undefined);
    child.stdin.end(o.stdin);
  }
  const [exitCode, sig] = await new Promise<[number | null, NodeJS.Signals | null]>((resolve, reject) => {
    child.once('error', reject);
    child.once('exit', (code, s) => resolve([code, s]));
  }).finally(() => {
    clearTimeout(timer);
    o.signal.removeEventListener('abort', onAbort);
    // Whatever the command left running in its group goes with it.
    killGroup();
  });
  // Output pipes close once every writer is gone; a writer outside the group is not waited for long.
  await Promise.race([closed, new Promise((r) => setTimeout(r, 1000).unref())]);
  for (const s of ['stdout', 'stderr'] as const) if (partial[s]) emit(s, partial[s]);
  return {
    exitCode,
    signal: sig,
    stdout: out.text(),
    stderr: err.text(),
    truncated: out.total > o.maxOutputBytes || err.total > o.maxOutputBytes,
    droppedLines,
    timedOut,
    aborted,
    durationMs: Date.now() - started,
  };
}
