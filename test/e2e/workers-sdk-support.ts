import { spawn, type ChildProcess } from 'node:child_process';
import path from 'node:path';
import { buildPrivateDist } from '../support/dist';
import type { TestApp } from '../support/test-app';

/** A line the child worker (workers-sdk-child.cjs) printed for an SDK event. */
export interface WorkerEvent {
  event: string;
  t: number;
  [k: string]: any;
}

export interface ChildWorker {
  child: ChildProcess;
  name: string;
  events: WorkerEvent[];
  /** Resolves with the first event (past or future) that matches; rejects when the child exits first or after `timeoutMs`. */
  waitFor(match: (e: WorkerEvent) => boolean, what: string, timeoutMs?: number): Promise<WorkerEvent>;
  signal(sig: NodeJS.Signals): void;
  /** Resolves when the child has exited. */
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  stderr(): string;
}

export interface ChildWorkerOptions {
  url: string | string[];
  token: string;
  tenantId: string;
  name: string;
  pool?: string;
  transport?: 'websocket' | 'long-poll';
  maxConcurrent?: number;
  taskTypes?: string[];
  /** How long its sleep and block handlers hold a task, whatever the task's inputs say. */
  holdMs?: number;
  /** The SDK to load (a module path or a package folder): by default the one compiled into this jest run's tree. */
  sdk?: string;
}

const CHILD = path.join(__dirname, 'workers-sdk-child.cjs');

/** Starts an SDK worker in a child process (the SDK compiled into this jest run's tree unless `opts.sdk` names another). */
export function startChildWorker(opts: ChildWorkerOptions, started: ChildProcess[]): ChildWorker {
  const sdk = opts.sdk ?? path.join(buildPrivateDist().dir, 'sdk', 'worker', 'src', 'index.js');
  const child = spawn(process.execPath, [CHILD], {
    env: {
      PATH: process.env.PATH,
      ORDO_SDK: sdk,
      ORDO_URLS: (Array.isArray(opts.url) ? opts.url : [opts.url]).join(','),
      ORDO_TOKEN: opts.token,
      ORDO_TENANT: opts.tenantId,
      WORKER_NAME: opts.name,
      WORKER_POOL: opts.pool ?? '',
      WORKER_TRANSPORT: opts.transport ?? 'websocket',
      WORKER_MAX_CONCURRENT: String(opts.maxConcurrent ?? 1),
      ...(opts.taskTypes ? { WORKER_TASK_TYPES: opts.taskTypes.join(',') } : {}),
      ...(opts.holdMs !== undefined ? { WORKER_HOLD_MS: String(opts.holdMs) } : {}),
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  started.push(child);
  const events: WorkerEvent[] = [];
  const listeners = new Set<() => void>();
  let buf = '';
  let err = '';
  child.stdout.on('data', (d: Buffer) => {
    buf += d.toString();
    let i: number;
    while ((i = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, i);
      buf = buf.slice(i + 1);
      try {
        events.push(JSON.parse(line) as WorkerEvent);
      } catch {
        err += `${line}\n`;
      }
      for (const l of listeners) l();
    }
  });
  child.stderr.on('data', (d: Buffer) => (err += d.toString()));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once('exit', (code, signal) => {
      resolve({ code, signal });
      for (const l of listeners) l();
    }),
  );
  return {
    child,
    name: opts.name,
    events,
    exited,
    stderr: () => err,
    signal: (sig) => child.kill(sig),
    waitFor(match, what, timeoutMs = 30_000) {
      return new Promise((resolve, reject) => {
        const check = () => {
          const found = events.find(match);
          if (found) {
            done();
            resolve(found);
          } else if (child.exitCode !== null || child.signalCode !== null) {
            done();
            reject(new Error(`${opts.name} exited before ${what}; events: ${JSON.stringify(events)}\n${err}`));
          }
        };
        const timer = setTimeout(() => {
          done();
          reject(
            new Error(`${opts.name}: no ${what} within ${timeoutMs} ms; events: ${JSON.stringify(events)}\n${err}`),
          );
        }, timeoutMs);
        const done = () => {
          clearTimeout(timer);
          listeners.delete(check);
        };
        listeners.add(check);
        check();
      });
    },
  };
}

/** Mints a worker token (scope `worker`, bound to `pool`) as the tenant's admin, through the API. */
export async function mintWorkerToken(
  app: TestApp,
  as: { token: string; tenantId: string },
  pool: string,
  subject: string,
): Promise<string> {
  const r = await app.request('POST', '/api/v1/tokens', { as, body: { scopes: ['worker'], pool, subject } });
  if (r.status !== 201) throw new Error(`minting a worker token: ${r.status} ${r.text}`);
  return r.body.token as string;
}

/** Publishes a DAG (JSON) through the API. */
export async function publishDagJson(app: TestApp, as: { token: string; tenantId: string }, dag: object) {
  const r = await app.request('POST', '/api/v1/dags', { as, body: dag });
  if (r.status !== 201 && r.status !== 200) throw new Error(`publishing: ${r.status} ${r.text}`);
}

/** Starts a run through the API and answers its id. */
export async function startRun(
  app: TestApp,
  as: { token: string; tenantId: string },
  dagId: string,
  inputs: object,
  runToken: string,
): Promise<string> {
  const r = await app.request('POST', '/api/v1/runs', { as, body: { dagId, inputs, runToken } });
  if (r.status !== 201) throw new Error(`starting a run: ${r.status} ${r.text}`);
  return r.body.runId as string;
}

/** Polls `probe` every 50 ms until it answers something other than undefined (at most `timeoutMs`). */
export async function until<T>(what: string, probe: () => Promise<T | undefined>, timeoutMs = 30_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await probe();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`${what}: not within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 50));
  }
}
