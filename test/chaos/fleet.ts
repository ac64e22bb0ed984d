import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import ts from 'typescript';
import { guard, root, sleep } from './cluster';

/**
 * The external workers of the worker cell: each one a separate process running external-worker.ts
 * with the SDK that `npm run build` compiled to dist/sdk/worker/src. The build leaves test/ out, so
 * the script is transpiled once into dist/test/chaos/, where its import of the SDK resolves to the
 * compiled one. The processes are told to the guard like Ordo's, so nothing outlives the harness.
 */

export interface ExternalWorker {
  name: string;
  transport: 'websocket' | 'long-poll';
  child: ChildProcess;
  log: string;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  alive(): boolean;
  stderrTail(): string;
}

export interface WorkerLine {
  kind: 'registered' | 'started' | 'handled' | 'result' | 'refused' | 'offline';
  worker: string;
  pid: number;
  at: number;
  workerId?: string;
  attemptId?: string;
  runId?: string;
  stepId?: string;
  attempt?: number;
  outcome?: string | null;
  code?: string;
  reason?: string;
}

export interface FleetOptions {
  urls: string[];
  tenant: string;
  token: string;
  pool: string;
  /** Where each worker appends its lines, one file a process. */
  dir: string;
  sleepMs: [number, number];
}

const SCRIPT = path.join(root, 'dist/test/chaos/external-worker.js');

/** Transpiles external-worker.ts next to the compiled SDK (no type check: `npm run typecheck` does that). */
export function compileWorkerScript(): string {
  const source = fs.readFileSync(path.join(__dirname, 'external-worker.ts'), 'utf8');
  const out = ts.transpileModule(source, {
    compilerOptions: {
      module: ts.ModuleKind.CommonJS,
      target: ts.ScriptTarget.ES2023,
      esModuleInterop: true,
    },
    fileName: 'external-worker.ts',
  });
  fs.mkdirSync(path.dirname(SCRIPT), { recursive: true });
  fs.writeFileSync(SCRIPT, out.outputText);
  return SCRIPT;
}

export class Fleet {
  readonly workers: ExternalWorker[] = [];

  constructor(private readonly opts: FleetOptions) {
    fs.mkdirSync(opts.dir, { recursive: true });
  }

  /** Starts a worker and waits (bounded) until it has registered. */
  async start(name: string, transport: ExternalWorker['transport'], timeoutMs = 30_000): Promise<ExternalWorker> {
    const log = path.join(this.opts.dir, `${name}.jsonl`);
    const child = spawn(path.join(root, 'node_modules/.bin/node'), [SCRIPT], {
      cwd: root,
      env: {
        PATH: process.env.PATH,
        CHAOS_WORKER_URLS: this.opts.urls.join(','),
        CHAOS_WORKER_TENANT: this.opts.tenant,
        CHAOS_WORKER_TOKEN: this.opts.token,
        CHAOS_WORKER_POOL: this.opts.pool,
        CHAOS_WORKER_NAME: name,
        CHAOS_WORKER_LOG: log,
        CHAOS_WORKER_TRANSPORT: transport,
        CHAOS_WORKER_SLEEP_MS: this.opts.sleepMs.join(','),
      },
      stdio: ['ignore', 'ignore', 'pipe'],
      detached: true,
    });
    if (child.pid) guard({ group: child.pid });
    let tail = '';
    const logDir = process.env.CHAOS_LOG_DIR;
    child.stderr?.on('data', (d: Buffer) => {
      tail = (tail + d.toString()).slice(-4000);
      if (logDir) fs.appendFileSync(path.join(logDir, `${name}.log`), d);
    });
    const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
      child.once('exit', (code, signal) => {
        if (child.pid) guard({ exited: child.pid });
        resolve({ code, signal });
      }),
    );
    const w: ExternalWorker = {
      name,
      transport,
      child,
      log,
      exited,
      alive: () => child.exitCode === null && child.signalCode === null,
      stderrTail: () => tail,
    };
    this.workers.push(w);
    const deadline = Date.now() + timeoutMs;
    while (!readLines(log).some((l) => l.kind === 'registered')) {
      if (!w.alive()) throw new Error(`worker ${name} exited before it registered:\n${tail}`);
      if (Date.now() > deadline) throw new Error(`worker ${name} not registered after ${timeoutMs} ms:\n${tail}`);
      await sleep(100);
    }
    return w;
  }

  live(): ExternalWorker[] {
    return this.workers.filter((w) => w.alive());
  }

  /** The tasks `w` has started and not yet handled, by its own lines. */
  running(w: ExternalWorker): number {
    const lines = readLines(w.log);
    const handled = new Set(lines.filter((l) => l.kind === 'handled').map((l) => l.attemptId));
    return lines.filter((l) => l.kind === 'started' && !handled.has(l.attemptId)).length;
  }

  /** Every line every worker wrote. */
  lines(): WorkerLine[] {
    return this.workers.flatMap((w) => readLines(w.log));
  }

  /** SIGTERM (the SDK drains: it finishes what it holds and leaves); SIGKILL after `graceMs`. */
  async stopAll(graceMs = 15_000): Promise<string[]> {
    const slow: string[] = [];
    await Promise.all(
      this.live().map(async (w) => {
        w.child.kill('SIGCONT');
        w.child.kill('SIGTERM');
        const r = await Promise.race([w.exited, sleep(graceMs).then(() => null)]);
        if (!r) {
          slow.push(w.name);
          w.child.kill('SIGKILL');
          await w.exited;
        }
      }),
    );
    return slow;
  }

  killAll(): void {
    for (const w of this.live()) {
      try {
        if (w.child.pid) process.kill(-w.child.pid, 'SIGKILL');
      } catch {
        // Exited meanwhile.
      }
    }
  }
}

function readLines(file: string): WorkerLine[] {
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch {
    return [];
  }
  // A process killed mid-write can leave a partial last line: only whole lines count.
  return text
    .split('\n')
    .filter((l) => l.endsWith('}'))
    .map((l) => JSON.parse(l) as WorkerLine);
}
