import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

/** Directories a bare command name is looked up in (and the PATH the command sees). */
export const SAFE_PATH = ['/usr/bin', '/bin'];

export interface CliLimits {
  cpuSeconds: number;
  memoryBytes: number;
  fileSizeBytes: number;
  processes: number;
}

export interface SandboxTools {
  prlimit: string;
  unshare: string;
}

export interface CliRunOptions {
  /** Absolute path of the executable (see resolveCommand). */
  command: string;
  args: readonly string[];
  /** Declared variables; the command sees only these plus PATH, HOME and LANG. */
  env: Readonly<Record<string, string>>;
  stdin?: string;
  timeoutMs: number;
  /** Bytes of stdout (and of stderr) kept; the rest is counted and dropped. */
  maxOutputBytes: number;
  /** Whether the command keeps the host's network (the step declares egress). */
  network: boolean;
  limits: CliLimits;
  signal: AbortSignal;
  /** Without a working sandbox: refuse (true) or run unsandboxed (false, the operator's choice). */
  requireSandbox: boolean;
  /** Each complete output line, as it arrives (at most `maxLogLines`). */
  onLine?(stream: 'stdout' | 'stderr', line: string): void;
  maxLogLines?: number;
  tools?: SandboxTools;
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

export function defaultTools(): SandboxTools {
  return { prlimit: which('prlimit') ?? '/usr/bin/prlimit', unshare: which('unshare') ?? '/usr/bin/unshare' };
}

/** Resolves an absolute path or a bare name (looked up in SAFE_PATH) to an executable file. */
export function resolveCommand(command: string): string | undefined {
  const candidates = path.isAbsolute(command)
    ? [path.normalize(command)]
    : command.includes('/')
      ? []
      : SAFE_PATH.map((d) => path.join(d, command));
  for (const c of candidates) {
    try {
      fs.accessSync(c, fs.constants.X_OK);
      if (fs.statSync(c).isFile()) return c;
    } catch {
      // not here
    }
  }
  return undefined;
}

type Support = { ok: true; unshare: string[] } | { ok: false; reason: string };
const supportCache = new Map<string, Support>();

/**
 * Finds the unshare flags that work on this host (probed once per tool pair): a new network
 * namespace (unless egress is declared) and a new PID namespace, so every process the command
 * starts, even one that leaves the process group, dies when the command ends. Unprivileged hosts
 * need a user namespace (`-r`) for that.
 */
export function sandboxSupport(tools: SandboxTools): Support {
  const key = `${tools.prlimit}\0${tools.unshare}`;
  const cached = supportCache.get(key);
  if (cached) return cached;
  let result: Support = { ok: false, reason: 'unshare and prlimit are missing or not permitted here' };
  const problems: string[] = [];
  for (const flags of [
    ['-n', '-p', '-f', '--kill-child'],
    ['-r', '-n', '-p', '-f', '--kill-child'],
  ]) {
    const r = spawnSync(tools.prlimit, ['--cpu=5', '--nproc=64', '--', tools.unshare, ...flags, '--', '/bin/true'], {
      timeout: 5000,
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    if (r.status === 0) {
      result = { ok: true, unshare: flags.filter((f) => f !== '-n') };
      break;
    }
    problems.push(r.error ? r.error.message : String(r.stderr).trim() || `exit ${r.status}`);
  }
  if (!result.ok)
    result = { ok: false, reason: `cannot set up the cli sandbox (unshare -n -p / prlimit): ${problems.join('; ')}` };
  supportCache.set(key, result);
  return result;
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
 * Runs one command: no shell, argv as given, a scrubbed environment, a private temporary working
 * directory (removed afterwards), rlimits via prlimit, its own network and PID namespaces via
 * unshare, and its own process group, killed with SIGKILL on timeout, abort and completion.
 */
export async function runCli(o: CliRunOptions): Promise<CliRunResult> {
  const tools = o.tools ?? defaultTools();
  const support = sandboxSupport(tools);
  if (!support.ok && o.requireSandbox) throw new SandboxUnavailableError(support.reason);

  const workdir = await fs.promises.mkdtemp(path.join(os.tmpdir(), 'ordo-cli-'));
  await fs.promises.chmod(workdir, 0o700);
  const env: Record<string, string> = { PATH: SAFE_PATH.join(':'), HOME: workdir, LANG: 'C', ...o.env };
  const limits = [
    `--cpu=${o.limits.cpuSeconds}`,
    `--as=${o.limits.memoryBytes}`,
    `--fsize=${o.limits.fileSizeBytes}`,
    `--nproc=${o.limits.processes}`,
  ];
  let file: string;
  let argv: string[];
  if (support.ok) {
    file = tools.prlimit;
    argv = [
      ...limits,
      '--',
      tools.unshare,
      ...(o.network ? [] : ['-n']),
      ...support.unshare,
      '--',
      o.command,
      ...o.args,
    ];
  } else {
    const prlimitWorks = fs.existsSync(tools.prlimit) && spawnSync(tools.prlimit, ['--', '/bin/true']).status === 0;
    file = prlimitWorks ? tools.prlimit : o.command;
    argv = prlimitWorks ? [...limits, '--', o.command, ...o.args] : [...o.args];
  }

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
  try {
    const child = spawn(file, argv, {
      cwd: workdir,
      env,
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
      sandboxed: support.ok,
      sandboxProblem: support.ok ? undefined : support.reason,
      durationMs: Date.now() - started,
    };
  } finally {
    await fs.promises.rm(workdir, { recursive: true, force: true }).catch(() => undefined);
  }
}
