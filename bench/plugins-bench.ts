import noop from '../plugins/noop/index';
import script from '../plugins/script/index';
import cli from '../plugins/cli/index';
import type { Plugin } from '../src/modules/plugins/plugin';
import { closeTestSandboxes, pluginContext } from '../src/modules/sandbox/testing/plugin-context';

export interface StepOverhead {
  name: string;
  iterations: number;
  /** Mean milliseconds per execute(). */
  meanMs: number;
  p50Ms: number;
  p95Ms: number;
  /** meanMs minus the noop plugin's meanMs. */
  overheadMs: number;
}

async function measure(
  plugin: Plugin,
  config: unknown,
  iterations: number,
  warmup: number,
  egress: string[] = [],
): Promise<Omit<StepOverhead, 'overheadMs'>> {
  const cfg = plugin.configSchema.parse(config);
  for (let i = 0; i < warmup; i++) {
    const r = await plugin.execute(cfg, pluginContext({ egress }));
    if (r.status !== 'succeeded') throw new Error(`${plugin.name} failed during warm-up: ${JSON.stringify(r)}`);
  }
  const times: number[] = [];
  for (let i = 0; i < iterations; i++) {
    const t = process.hrtime.bigint();
    const r = await plugin.execute(cfg, pluginContext({ egress }));
    times.push(Number(process.hrtime.bigint() - t) / 1e6);
    if (r.status !== 'succeeded') throw new Error(`${plugin.name} failed: ${JSON.stringify(r)}`);
  }
  times.sort((a, b) => a - b);
  const mean = times.reduce((a, b) => a + b, 0) / times.length;
  return {
    name: egress.length > 0 ? `${plugin.name}+egress` : plugin.name,
    iterations,
    meanMs: mean,
    p50Ms: times[Math.floor(times.length / 2)],
    p95Ms: times[Math.floor(times.length * 0.95)],
  };
}

/**
 * Per-step overhead of the script plugin (a no-op script in a warm sandbox process) and of the
 * cli plugin (`/bin/true` in its bubblewrap sandbox with rlimits; again with an egress entry, which
 * adds the egress proxy and the forwarder inside), each against the noop plugin's execute(),
 * sequentially on one caller.
 */
export async function benchPluginSteps(
  opts: { iterations?: number; cliIterations?: number } = {},
): Promise<StepOverhead[]> {
  const n = opts.iterations ?? 500;
  const base = await measure(noop, {}, n, 50);
  const s = await measure(script, { code: 'return 1' }, n, 50);
  const c = await measure(cli, { command: '/bin/true' }, opts.cliIterations ?? 50, 5);
  const ce = await measure(cli, { command: '/bin/true' }, opts.cliIterations ?? 50, 5, ['example.com']);
  await closeTestSandboxes();
  return [base, s, c, ce].map((r) => ({ ...r, overheadMs: r.meanMs - base.meanMs }));
}

if (require.main === module) {
  benchPluginSteps().then(
    (rows) => {
      for (const r of rows) {
        console.log(
          `${r.name.padEnd(8)} n=${r.iterations} mean=${r.meanMs.toFixed(3)} ms p50=${r.p50Ms.toFixed(3)} ms p95=${r.p95Ms.toFixed(3)} ms overhead=${r.overheadMs.toFixed(3)} ms`,
        );
      }
    },
    (e: unknown) => {
      console.error(e);
      process.exitCode = 1;
    },
  );
}
