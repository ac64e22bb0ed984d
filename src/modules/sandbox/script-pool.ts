import { spawn, type ChildProcess } from 'node:child_process';
import path from 'node:path';
import type { SandboxView } from './bwrap';
import { helperFile, nodeBinary, type Sandbox, type SandboxLaunch } from './sandbox';
import type { SandboxId } from './sandbox-ids';

/** One console line of a script (the shape of a step log line). */
export interface ScriptLogLine {
  ts: string;
  level: 'debug' | 'info' | 'warn' | 'error';
  message: string;
}

/** One script step as the sandbox process receives it. */
export interface ScriptJob {
  code: string;
  inputsJson: string;
  stepsJson: string;
  memoryLimitMb: number;
  timeoutMs: number;
  maxOutputBytes: number;
  maxLogLines: number;
  maxLogLineBytes: number;
  maxFetches: number;
}

export type ScriptOutcome =
  | { ok: true; json: string; logs: ScriptLogLine[]; dropped: number }
  | { ok: false; code: ScriptFailureCode; message: string; logs: ScriptLogLine[]; dropped: number };

export type ScriptFailureCode =
  'SCRIPT_ERROR' | 'SCRIPT_TIMEOUT' | 'SCRIPT_MEMORY' | 'SANDBOX_CRASHED' | 'OUTPUT_TOO_LARGE' | 'ABORTED';

export interface ScriptHooks {
  signal: AbortSignal;
  /** Performs a `fetch` of the script in the host (where the egress check runs); answers JSON text. */
  fetch(url: string, initJson: string): Promise<string>;
}

interface HostMessage {
  type: 'ready' | 'result' | 'fetch';
  id?: number;
  reqId?: number;
  url?: string;
  init?: string;
  ok?: boolean;
  json?: string;
  code?: ScriptFailureCode;
  message?: string;
  fatal?: boolean;
  logs?: ScriptLogLine[];
  dropped?: number;
}

interface Slot {
  child: ChildProcess;
  id: SandboxId;
  ready: Promise<void>;
  busy: boolean;
  dead: boolean;
  stderr: string;
}

export interface ScriptPoolOptions {
  /** Sandbox processes (each runs one step at a time). */
  size: number;
  /** Extra wall time the parent waits past a step's timeout before killing its process. */
  killGraceMs?: number;
  /** The process's program instead of script-host.js (tests stand in an isolate escape with it). */
  entry?: string;
}

/** Where the script host's files appear inside its sandbox. */
const ROOT = '/ordo';

/**
 * A pool of sandbox processes for script steps. A process runs one step at a time; a step that
 * times out, exceeds its memory, is aborted or whose process dies ends with its process killed
 * (SIGKILL) and a fresh one started in its place, so only that step fails and the caller never does.
 *
 * The isolate is the boundary a script meets; the process around it is a second one, built like a
 * `cli` step's sandbox (see bwrap.ts): its own unprivileged host uid, every namespace new (so no
 * network at all: `fetch` runs in the parent), `no_new_privs`, and a view holding only the system's
 * libraries, the Node binary, isolated-vm and the host script, so a script that escaped its isolate
 * would land in a process that can read, reach and signal nothing of the instance.
 */
export class ScriptSandboxPool {
  private readonly slots: Slot[] = [];
  private readonly waiters: ((s: Slot) => void)[] = [];
  private closed = false;
  private seq = 0;
  /** Processes started and killed over the pool's life (for tests and metrics). */
  readonly stats = { started: 0, killed: 0 };

  constructor(
    private readonly sandbox: Sandbox,
    private readonly opts: ScriptPoolOptions,
  ) {}

  /** Why the processes run without bubblewrap, when they do (undefined: sandboxed). */
  get sandboxProblem(): string | undefined {
    const support = this.sandbox.available();
    return support.ok ? undefined : support.reason;
  }

  /** Pids of the processes currently running a step. */
  busyPids(): number[] {
    return this.slots.filter((s) => s.busy && !s.dead).map((s) => s.child.pid!);
  }

  allPids(): number[] {
    return this.slots.filter((s) => !s.dead).map((s) => s.child.pid!);
  }

  /** Starts every process now instead of on first use. */
  async warm(): Promise<void> {
    while (this.slots.length < this.opts.size) this.spawn();
    await Promise.all(this.slots.map((s) => s.ready.catch(() => undefined)));
  }

  async run(job: ScriptJob, hooks: ScriptHooks): Promise<ScriptOutcome> {
    if (this.closed) throw new Error('the script sandbox pool is closed');
    if (hooks.signal.aborted)
      return { ok: false, code: 'ABORTED', message: 'the step was aborted', logs: [], dropped: 0 };
    const slot = await this.acquire();
    const child = slot.child;
    // A busy process keeps the event loop alive (an idle one does not, see idle()).
    child.ref();
    (child.channel as { ref?: () => void } | undefined)?.ref?.();
    try {
      await slot.ready;
    } catch (e) {
      this.discard(slot);
      return {
        ok: false,
        code: 'SANDBOX_CRASHED',
        message: `the sandbox process did not start: ${(e as Error).message}`,
        logs: [],
        dropped: 0,
      };
    }
    const id = ++this.seq;

    return new Promise<ScriptOutcome>((resolve) => {
      let settled = false;
      const finish = (outcome: ScriptOutcome, kill: boolean) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        hooks.signal.removeEventListener('abort', onAbort);
        child.off('message', onMessage);
        child.off('exit', onExit);
        if (kill) this.discard(slot);
        else this.release(slot);
        resolve(outcome);
      };
      const onMessage = (msg: HostMessage) => {
        if (msg.type === 'fetch' && msg.id === id) {
          hooks.fetch(msg.url ?? '', msg.init ?? '{}').then(
            (result) => child.connected && child.send({ type: 'fetchResult', reqId: msg.reqId, result }),
            (e: Error) =>
              child.connected &&
              child.send({
                type: 'fetchResult',
                reqId: msg.reqId,
                result: JSON.stringify({ error: { code: 'FETCH_FAILED', message: e.message } }),
              }),
          );
        } else if (msg.type === 'result' && msg.id === id) {
          const logs = msg.logs ?? [];
          const dropped = msg.dropped ?? 0;
          if (msg.ok) finish({ ok: true, json: msg.json ?? 'null', logs, dropped }, false);
          else
            finish(
              {
                ok: false,
                code: msg.code ?? 'SCRIPT_ERROR',
                message: msg.message ?? 'the script failed',
                logs,
                dropped,
              },
              msg.fatal === true,
            );
        }
      };
      const onExit = (code: number | null, sig: NodeJS.Signals | null) => {
        const tail = slot.stderr.trim().split('\n').slice(-3).join(' | ');
        finish(
          {
            ok: false,
            code: 'SANDBOX_CRASHED',
            message: `the sandbox process died (${sig ?? `exit ${code}`})${tail ? `: ${tail.slice(0, 1000)}` : ''}`,
            logs: [],
            dropped: 0,
          },
          true,
        );
      };
      const onAbort = () =>
        finish({ ok: false, code: 'ABORTED', message: 'the step was aborted', logs: [], dropped: 0 }, true);
      const timer = setTimeout(
        () =>
          finish(
            {
              ok: false,
              code: 'SCRIPT_TIMEOUT',
              message: `the script exceeded its time limit of ${job.timeoutMs} ms`,
              logs: [],
              dropped: 0,
            },
            true,
          ),
        job.timeoutMs + (this.opts.killGraceMs ?? 1000),
      );
      child.on('message', onMessage);
      child.on('exit', onExit);
      hooks.signal.addEventListener('abort', onAbort, { once: true });
      // Aborted while the process was starting: the listener above would never fire, and the
      // process, which has run nothing, goes back to the pool.
      if (hooks.signal.aborted) {
        return finish({ ok: false, code: 'ABORTED', message: 'the step was aborted', logs: [], dropped: 0 }, false);
      }
      child.send({ type: 'run', id, ...job }, (err) => {
        if (err) onExit(null, null);
      });
    });
  }

  async close(): Promise<void> {
    this.closed = true;
    const live = this.slots.splice(0).filter((s) => !s.dead);
    await Promise.all(
      live.map(
        (s) =>
          new Promise<void>((resolve) => {
            if (s.child.exitCode !== null || s.child.signalCode !== null) return resolve();
            s.child.once('exit', () => resolve());
            // Keeps the event loop alive until the exit is seen (idle processes are unref'd).
            s.child.ref();
            s.child.kill('SIGKILL');
          }),
      ),
    );
  }

  /** The launch of one host process: in its sandbox when bubblewrap works here, else as `id` alone. */
  private launch(id: SandboxId): SandboxLaunch {
    const entry = this.opts.entry ?? helperFile('script-host.js');
    const flags = ['--no-node-snapshot', '--max-old-space-size=256'];
    if (!this.sandbox.available().ok) return { file: nodeBinary(), args: [...flags, entry], uid: id.uid, gid: id.gid };
    const ivm = path.dirname(require.resolve('isolated-vm/package.json'));
    const gypBuild = path.dirname(require.resolve('node-gyp-build/package.json', { paths: [ivm] }));
    const view: SandboxView = {
      readOnly: [
        [nodeBinary(), `${ROOT}/node`],
        [entry, `${ROOT}/${path.basename(entry)}`],
        [ivm, `${ROOT}/node_modules/isolated-vm`],
        [gypBuild, `${ROOT}/node_modules/node-gyp-build`],
      ],
      tmpfs: [['/tmp', 16 * 1024 * 1024, 0o1777]],
      cwd: ROOT,
    };
    return this.sandbox.launch(id, view, [`${ROOT}/node`, ...flags, `${ROOT}/${path.basename(entry)}`]);
  }

  private spawn(): Slot {
    const id = this.sandbox.ids.acquire();
    const { file, args, uid, gid } = this.launch(id);
    const child = spawn(file, args, {
      cwd: '/',
      uid,
      gid,
      env: { NODE_ENV: 'production' },
      stdio: ['ignore', 'ignore', 'pipe', 'ipc'],
      serialization: 'json',
    });
    this.stats.started++;
    const slot: Slot = { child, id, busy: false, dead: false, stderr: '', ready: Promise.resolve() };
    slot.ready = new Promise<void>((resolve, reject) => {
      // A process that does not come up in time is killed; its step fails as SANDBOX_CRASHED.
      const startup = setTimeout(() => {
        reject(new Error('no ready signal within 30 s'));
        child.kill('SIGKILL');
      }, 30_000);
      startup.unref();
      const onMsg = (m: HostMessage) => {
        if (m.type === 'ready') {
          clearTimeout(startup);
          child.off('message', onMsg);
          resolve();
        }
      };
      child.on('message', onMsg);
      child.once('exit', (code, sig) => reject(new Error(`exited (${sig ?? code}) ${slot.stderr.slice(-500)}`)));
      child.once('error', reject);
    });
    slot.ready.catch(() => undefined);
    child.stderr?.on('data', (c: Buffer) => {
      slot.stderr = (slot.stderr + c.toString()).slice(-4000);
    });
    child.on('exit', () => {
      slot.dead = true;
      id.release();
      // An idle process that died is dropped; a busy one is handled by its step (see run).
      if (!slot.busy) {
        const i = this.slots.indexOf(slot);
        if (i >= 0) this.slots.splice(i, 1);
      }
    });
    child.on('error', () => {
      slot.dead = true;
      id.release();
    });
    this.idle(slot);
    this.slots.push(slot);
    return slot;
  }

  /** Idle processes do not keep the event loop (and a test run) alive. */
  private idle(slot: Slot) {
    slot.child.unref();
    (slot.child.channel as { unref?: () => void } | undefined)?.unref?.();
    (slot.child.stderr as unknown as { unref?: () => void } | null)?.unref?.();
  }

  private acquire(): Promise<Slot> {
    const free = this.slots.find((s) => !s.busy && !s.dead);
    if (free) {
      free.busy = true;
      return Promise.resolve(free);
    }
    if (this.slots.filter((s) => !s.dead).length < this.opts.size) {
      const s = this.spawn();
      s.busy = true;
      return Promise.resolve(s);
    }
    return new Promise((resolve) => this.waiters.push(resolve));
  }

  private release(slot: Slot) {
    if (slot.dead) return this.discard(slot);
    const next = this.waiters.shift();
    if (next) return next(slot);
    slot.busy = false;
    this.idle(slot);
  }

  /** Kills a process after a fatal step and starts its replacement (for the next waiter, if any). */
  private discard(slot: Slot) {
    const i = this.slots.indexOf(slot);
    if (i >= 0) this.slots.splice(i, 1);
    if (!slot.dead) {
      slot.dead = true;
      this.stats.killed++;
      slot.child.kill('SIGKILL');
    }
    if (this.closed) return;
    const fresh = this.spawn();
    const next = this.waiters.shift();
    if (next) {
      fresh.busy = true;
      next(fresh);
    }
  }
}
