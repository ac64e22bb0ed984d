import { z } from 'zod';
import { DAG_ID } from '../../src/modules/dags/dag-definition';
import { definePlugin } from '../../src/modules/plugins/plugin';

const config = z.strictObject({
  /** The child DAG, of the same tenant (a literal id: it is resolved when the parent is published). */
  dag: z.string().regex(DAG_ID, 'a DAG id'),
  /** The child DAG's version; `latest` (the default) is resolved to a number when the parent is published. */
  version: z.union([z.number().int().min(1), z.literal('latest')]).default('latest'),
  /** The child run's inputs (templated), checked against the child DAG's input schema. */
  inputs: z.record(z.string(), z.unknown()).default({}),
});

/**
 * Runs another DAG of the tenant as a child run: the step starts the child (its run token derives
 * from the parent run and step, so a step delivered twice starts one child), waits for it without
 * holding a worker slot or lease, and succeeds with the child's outputs
 * `{dagId, version, outputsHash, steps: {<stepId>: outputs}}`, or fails CHILD_RUN_FAILED.
 */
export default definePlugin({
  name: 'dag',
  description: 'Starts a child run of another DAG of the tenant and waits for it; its outputs are the child run’s.',
  configSchema: config,
  waitFor: (cfg) => ({
    kind: 'dag',
    dag: cfg.dag,
    // (Published versions are numbers: `latest` is resolved at publish.)
    version: cfg.version === 'latest' ? 0 : cfg.version,
  }),
  // A dag step is started and resumed by the engine, never run (the worker asks waitFor instead).
  execute: () =>
    Promise.resolve({
      status: 'failed' as const,
      error: { code: 'DAG_STEP_NOT_RUNNABLE', message: 'a dag step waits for its child run', retryable: false },
    }),
});
