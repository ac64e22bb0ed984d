/**
 * A process of SDK workers for the external-workers benchmark (bench/workers-bench.ts forks it):
 * `WORKERS` workers of pool `POOL` with a no-op handler for task type `noop`, as a tenant would run
 * them, importing the SDK alone. It says `ready` once all are registered, reports each handler's
 * start when `REPORT_STARTS` is set, and stops its workers on SIGTERM.
 */
import { OrdoWorker, type TransportKind } from '../sdk/worker/src';

/** Messages from this process to the benchmark. */
export type ExtWorkerMessage =
  { type: 'ready' } | { type: 'start'; attemptId: string; runId: string; stepId: string; t: number };

async function main(): Promise<void> {
  const env = process.env;
  const send = (m: ExtWorkerMessage) => process.send!(m);
  const workers: OrdoWorker[] = [];
  for (let i = 0; i < Number(env.WORKERS); i++) {
    const w = new OrdoWorker({
      urls: [env.ORDO_URL!],
      token: env.ORDO_TOKEN!,
      tenantId: env.ORDO_TENANT!,
      name: `${env.NAME}-${i}`,
      pool: env.POOL!,
      transport: env.TRANSPORT as TransportKind,
      maxConcurrent: Number(env.MAX_CONCURRENT),
    });
    w.handle('noop', {
      run: (_input, ctx) => {
        if (env.REPORT_STARTS)
          send({ type: 'start', attemptId: ctx.attemptId, runId: ctx.runId, stepId: ctx.stepId, t: Date.now() });
        return {};
      },
    });
    w.on('warning', () => undefined);
    workers.push(w);
  }
  // Registrations go 50 at a time, as a fleet coming up would.
  for (let i = 0; i < workers.length; i += 50) await Promise.all(workers.slice(i, i + 50).map((w) => w.start()));
  process.once('SIGTERM', () => void Promise.all(workers.map((w) => w.stop())).then(() => process.exit(0)));
  send({ type: 'ready' });
}

main().catch((e: unknown) => {
  console.error(e);
  process.exit(1);
});
