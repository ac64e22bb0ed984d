// An SDK worker run as a child process by test/e2e/workers-sdk*.test.ts and sdk-packages.test.ts
// (the SDK of the test's build of the tree, or a packed one). Its handlers:
//   echo        answers { value, worker }
//   sleep       reports progress 10, waits WORKER_HOLD_MS or inputs.ms (aborted by ctx.signal), then answers { worker }
//   block       blocks its thread for WORKER_HOLD_MS or inputs.ms (as a CPU-bound handler would), then answers { worker }
//   bad-output  declares { n: integer } and answers { n: 'many' } (a contract violation)
//   noop        answers {} (the bench)
// It prints one JSON line per SDK event on stdout. Configured by the environment: ORDO_SDK (the
// SDK's module or package folder), ORDO_URLS (comma-separated), ORDO_TOKEN, ORDO_TENANT,
// WORKER_NAME, WORKER_POOL, WORKER_TRANSPORT, WORKER_MAX_CONCURRENT, WORKER_TASK_TYPES
// (comma-separated; default all), WORKER_HOLD_MS.
'use strict';
const { OrdoWorker, TaskError } = require(process.env.ORDO_SDK);

const env = process.env;
const hold = (input) => (env.WORKER_HOLD_MS ? Number(env.WORKER_HOLD_MS) : input.ms);
const name = env.WORKER_NAME ?? `w-${process.pid}`;
const print = (event, data = {}) => process.stdout.write(`${JSON.stringify({ event, t: Date.now(), ...data })}\n`);
const worker = new OrdoWorker({
  urls: env.ORDO_URLS.split(','),
  token: env.ORDO_TOKEN,
  tenantId: env.ORDO_TENANT,
  name,
  pool: env.WORKER_POOL || undefined,
  transport: env.WORKER_TRANSPORT ?? 'websocket',
  maxConcurrent: Number(env.WORKER_MAX_CONCURRENT ?? '1'),
  backoff: { baseMs: 50, maxMs: 500 },
  handleSignals: true,
});

const handlers = {
  echo: { run: (input) => ({ value: input.value ?? null, worker: name }) },
  sleep: {
    run: (input, ctx) =>
      new Promise((resolve, reject) => {
        ctx.progress(10, 'sleeping');
        const timer = setTimeout(() => resolve({ worker: name }), hold(input));
        ctx.signal.addEventListener('abort', () => {
          clearTimeout(timer);
          reject(new TaskError('transient', 'ABORTED', 'aborted'));
        });
      }),
  },
  block: {
    run: (input) => {
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, hold(input));
      return { worker: name };
    },
  },
  'bad-output': {
    output: { type: 'object', required: ['n'], properties: { n: { type: 'integer' } } },
    run: () => ({ n: 'many' }),
  },
  noop: { run: () => ({}) },
};
const types = env.WORKER_TASK_TYPES ? env.WORKER_TASK_TYPES.split(',') : Object.keys(handlers);
for (const t of types) worker.handle(t, handlers[t]);

worker.on('registered', (r) => print('registered', { workerId: r.workerId, pool: r.pool }));
worker.on('transport', (kind) => print('transport', { kind }));
worker.on('task', (t) =>
  print('task', { attemptId: t.attemptId, runId: t.runId, stepId: t.stepId, taskType: t.taskType, attempt: t.attempt }),
);
worker.on('result', ({ task, body, answer }) =>
  print('result', { attemptId: task.attemptId, runId: task.runId, status: body.status, answer: answer ?? null }),
);
worker.on('refused', ({ task, code }) => print('refused', { attemptId: task.attemptId, runId: task.runId, code }));
worker.on('cancelled', (c) => print('cancelled', c));
worker.on('offline', (o) => print('offline', o));
worker.on('warning', (e) => print('warning', { message: e.message }));
worker.on('stopped', () => print('stopped'));
worker.start().catch((e) => {
  print('failed', { message: e.message, code: e.code ?? null, status: e.status ?? null });
  process.exitCode = 1;
});
