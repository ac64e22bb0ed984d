/**
 * An external worker that handles the `resize-image` task type of examples/workers/resize.yaml.
 * It computes the size an image takes at the asked width (keeping its aspect ratio) and answers a
 * URL for it; a real worker would fetch the image and resize it here.
 *
 * Configured by the environment (see docs/workers.md):
 *   ORDO_URLS           base URLs of Ordo, comma-separated (default http://127.0.0.1:8080)
 *   ORDO_TENANT         the tenant id (default "default")
 *   ORDO_WORKER_TOKEN   a token with the `worker` scope, bound to the pool
 *   ORDO_POOL           the pool (default "gpu")
 *   ORDO_WORKER_NAME    the worker's name (default "resize-1")
 *   ORDO_TRANSPORT      websocket (default) or long-poll
 * Prints one JSON line per event on stdout; SIGTERM or SIGINT drains it. It imports the SDK from
 * this repository's sources; a worker of your own imports the package, `@ordo/worker-sdk`
 * (sdk/worker: `npm pack` there makes its tarball).
 */
import { z } from 'zod';
import { OrdoWorker, TaskError, type TransportKind } from '../../sdk/worker/src';

const env = process.env;
if (!env.ORDO_WORKER_TOKEN) {
  process.stderr.write('ORDO_WORKER_TOKEN is required: a token with the worker scope (see docs/workers.md)\n');
  process.exit(2);
}

const worker = new OrdoWorker({
  urls: (env.ORDO_URLS ?? 'http://127.0.0.1:8080').split(','),
  token: env.ORDO_WORKER_TOKEN,
  tenantId: env.ORDO_TENANT ?? 'default',
  name: env.ORDO_WORKER_NAME ?? 'resize-1',
  pool: env.ORDO_POOL ?? 'gpu',
  transport: (env.ORDO_TRANSPORT as TransportKind | undefined) ?? 'websocket',
  maxConcurrent: 4,
  costPerSecond: 0.002,
  resources: { cpu: 4, memory: '8GiB', gpu: { count: 1, model: 'L4', vram: '24GiB' } },
  labels: { example: 'resize' },
  handleSignals: true,
});

worker.handle('resize-image', {
  input: z.object({
    url: z.string(),
    width: z.number().int().positive(),
    sourceWidth: z.number().int().positive(),
    sourceHeight: z.number().int().positive(),
  }),
  output: z.object({ url: z.string(), width: z.number().int(), height: z.number().int() }),
  async run(input, ctx) {
    if (!/^https?:\/\//.test(input.url)) {
      throw new TaskError('invalid_input', 'URL_NOT_HTTP', `not an http(s) URL: ${input.url}`);
    }
    if (input.width > input.sourceWidth) {
      throw new TaskError('permanent', 'UPSCALE_REFUSED', `${input.width} is wider than the source`);
    }
    ctx.progress(50, 'size computed');
    ctx.log('info', `resizing ${input.url} to ${input.width} px wide`);
    const height = Math.round((input.sourceHeight * input.width) / input.sourceWidth);
    return { url: `${input.url}?w=${input.width}`, width: input.width, height };
  },
});

const print = (event: string, data: object) => process.stdout.write(`${JSON.stringify({ event, ...data })}\n`);
worker.on('registered', (r) => print('registered', { workerId: r.workerId, pool: r.pool }));
worker.on('transport', (kind) => print('transport', { kind }));
worker.on('task', (t) => print('task', { attemptId: t.attemptId, runId: t.runId, stepId: t.stepId }));
worker.on('result', ({ task, body, answer }) =>
  print('result', { attemptId: task.attemptId, status: body.status, outcome: answer.outcome }),
);
worker.on('warning', (e) => process.stderr.write(`warning: ${e.message}\n`));
worker.on('stopped', () => print('stopped', {}));

worker.start().catch((e: unknown) => {
  process.stderr.write(`cannot start: ${(e as Error).message}\n`);
  process.exit(1);
});
