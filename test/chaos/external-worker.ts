/**
 * An external worker of the chaos harness's worker cell, one per process (fleet.ts starts it with
 * the SDK compiled by `npm run build`). It handles the `chaos-echo` task type: sleeps a random
 * while, then answers its inputs' `k` with the worker's name and the task's runId, stepId and
 * attempt. Each task started and handled, each result the server took and each one it refused is
 * appended as one JSON line to CHAOS_WORKER_LOG, written synchronously so a SIGKILL loses no line it wrote.
 *
 * Environment: CHAOS_WORKER_URLS (comma-separated), CHAOS_WORKER_TENANT, CHAOS_WORKER_TOKEN,
 * CHAOS_WORKER_POOL, CHAOS_WORKER_NAME, CHAOS_WORKER_LOG, CHAOS_WORKER_TRANSPORT (websocket or
 * long-poll), CHAOS_WORKER_SLEEP_MS ("min,max"). SIGTERM drains it.
 */
import fs from 'node:fs';
import { OrdoWorker, type TransportKind } from '../../sdk/worker/src';

const env = process.env;
const name = env.CHAOS_WORKER_NAME ?? 'chaos-worker';
const logFile = env.CHAOS_WORKER_LOG ?? `${name}.jsonl`;
const [minMs, maxMs] = (env.CHAOS_WORKER_SLEEP_MS ?? '100,600').split(',').map(Number);

function line(kind: string, data: Record<string, unknown>): void {
  fs.appendFileSync(logFile, `${JSON.stringify({ kind, worker: name, pid: process.pid, at: Date.now(), ...data })}\n`);
}

const worker = new OrdoWorker({
  urls: (env.CHAOS_WORKER_URLS ?? '').split(',').filter(Boolean),
  token: env.CHAOS_WORKER_TOKEN ?? '',
  tenantId: env.CHAOS_WORKER_TENANT ?? '',
  name,
  pool: env.CHAOS_WORKER_POOL,
  transport: (env.CHAOS_WORKER_TRANSPORT as TransportKind | undefined) ?? 'websocket',
  maxConcurrent: 4,
  handleSignals: true,
  backoff: { baseMs: 100, maxMs: 1_000 },
});

worker.handle('chaos-echo', {
  input: { type: 'object', required: ['k'], properties: { k: { type: 'string' } } },
  output: {
    type: 'object',
    required: ['k', 'worker', 'runId', 'stepId', 'attempt'],
    properties: {
      k: { type: 'string' },
      worker: { type: 'string' },
      runId: { type: 'string' },
      stepId: { type: 'string' },
      attempt: { type: 'integer' },
    },
  },
  async run(input, ctx) {
    const { k } = input as { k: string };
    const task = { attemptId: ctx.attemptId, runId: ctx.runId, stepId: ctx.stepId, attempt: ctx.attempt };
    line('started', task);
    // The sleep ignores ctx.signal: a paused worker finishes what it held and posts it late.
    await new Promise((r) => setTimeout(r, minMs + Math.random() * (maxMs - minMs)));
    line('handled', { ...task, aborted: ctx.signal.aborted });
    return { k, worker: name, runId: ctx.runId, stepId: ctx.stepId, attempt: ctx.attempt };
  },
});

worker.on('registered', (r) => line('registered', { workerId: r.workerId }));
worker.on('result', ({ task, answer }) =>
  line('result', { attemptId: task.attemptId, runId: task.runId, outcome: answer?.outcome ?? null }),
);
worker.on('refused', ({ task, code }) =>
  line('refused', { attemptId: task.attemptId, runId: task.runId, stepId: task.stepId, code }),
);
worker.on('offline', ({ workerId, reason }) => line('offline', { workerId, reason }));
worker.on('warning', (e) => process.stderr.write(`warning: ${e.message}\n`));

worker.start().catch((e: unknown) => {
  process.stderr.write(`cannot start: ${(e as Error).message}\n`);
  process.exit(1);
});
void worker.wait().then(
  () => process.exit(0),
  () => process.exit(1),
);
