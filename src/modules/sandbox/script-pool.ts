import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { projectRoot } from '../../core/home/project-root';
import type { StepLogLine } from '../plugins/plugin';

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
  | { ok: true; json: string; logs: StepLogLine[]; dropped: number }
  | { ok: false; code: ScriptFailureCode; message: string; logs: StepLogLine[]; dropped: number };

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
  logs?: StepLogLine[];
  dropped?: number;
}

interface Slot {
  child: ChildProcess;
  ready: Promise<void>;
  busy: boolean;
  dead: boolean;
  stderr: string;
}

export interface ScriptPoolOptions {
  /** Sandbox processes (each runs one step at a time). */
  size: number;
  /**
   * Starts each process in its own, empty network namespace when the host allows it (default):
   * should a script ever escape its isolate, the process still has no network. `fetch` needs none,
   * it runs in the parent.
   */
  isolateNetwork?: boolean;
  /** Extra wall time the parent waits past a step's timeout before killing its process. */
  killGraceMs?: number;
}

/** The Node binary for sandbox processes: this one when it is Node 24+, else the pinned one in node_modules. */
function nodeBinary(): string {
  if (Number(process.versions.node.split('.')[0]) >= 24) return process.execPath;
  return path.join(projectRoot(), 'node_modules', '.bin', 'node');
}

let netnsPrefix: string[] | null | undefined;

/** `unshare -n --` (or `unshare -r -n --` without privileges) when it works here; null when neither does. */
function networkNamespacePrefix(): string[] | undefined {
  if (netnsPrefix === undefined) {
    netnsPrefix = null;
    for (const unshare of ['/usr/bin/unshare', '/bin/unshare']) {
      if (!fs.existsSync(unshare)) continue;
      for (const flags of [['-n'], ['-r', '-n']]) {
        if (spawnSync(unshare, [...flags, '--', '/bin/true'], { stdio: 'ignore', timeout: 5000 }).status === 0) {
          netnsPrefix = [unshare, ...flags, '--'];
          break;
        }
      }
      break;
    }
  }
  return netnsPrefix ?? undefined;
}

/** The host entry next to this module (src/ under ts-jest/swc-jest, dist/ when built). */
function hostEntry(): string {
  const here = path.join(__dirname, 'script-host.js');
  if (fs.existsSync(here)) return here;
  return path.join(projectRoot(), 'src', 'modules', 'sandbox', 'script-host.js');
}

/**
 * A pool of sandbox processes for script steps. A process runs one step at a time; a step that
 * times out, exceeds its memory, is aborted or whose process dies ends with its process killed
 * (SIGKILL) and a fresh one started in its place, so only that step fails and the caller never does.
 */
export class ScriptSandboxPool {
  private readonly slots: Slot[] = [];
  private readonly waiters: ((s: Slot) => void)[] = [];
  private closed = false;
  private seq = 0;
  /** Processes started and killed over the pool's life (for tests and metrics). */
  readonly stats = { started: 0, killed: 0 };

  constructor(private readonly opts: ScriptPoolOptions) {}

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

  private spawn(): Slot {
    const node = [nodeBinary(), '--no-node-snapshot', '--max-old-space-size=256', hostEntry()];
    const netns = this.opts.isolateNetwork === false ? undefined : networkNamespacePrefix();
    const [file, ...args] = netns ? [...netns, ...node] : node;
    const child = spawn(file, args, {
      env: { NODE_ENV: 'production' },
      stdio: ['ignore', 'ignore', 'pipe', 'ipc'],
      serialization: 'json',
    });
    this.stats.started++;
    const slot: Slot = { child, busy: false, dead: false, stderr: '', ready: Promise.resolve() };
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
      // An idle process that died is dropped; a busy one is handled by its step (see run).
      if (!slot.busy) {
        const i = this.slots.indexOf(slot);
        if (i >= 0) this.slots.splice(i, 1);
      }
    });
    child.on('error', () => {
      slot.dead = true;
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
