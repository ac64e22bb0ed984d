import { z } from 'zod';
import { definePlugin, type JsonObject } from '../../src/modules/plugins/plugin';

const config = z.strictObject({
  /** Returned as the step's outputs. */
  output: z.record(z.string(), z.unknown()).optional(),
  /** Milliseconds to wait before returning (honours cancellation). */
  sleepMs: z.union([z.number().int().min(0).max(3_600_000), z.string()]).optional(),
  /** Fail instead of succeeding (for tests of retries and upstream failure). */
  fail: z.union([z.boolean(), z.string()]).optional(),
  /** With `fail`, whether the failure is retryable. */
  retryable: z.boolean().optional(),
  /** With `fail`, the failure's class (it decides over `retryable`). */
  errorClass: z.enum(['transient', 'permanent', 'invalid_input']).optional(),
  /** With `errorClass: invalid_input`, the input named at fault. */
  input: z.string().max(200).optional(),
  /** The named status to succeed with (one the step declares in `statuses`). */
  namedStatus: z.string().optional(),
});

/** Returns its `output` (optionally after sleeping): the engine's test and benchmark plugin. */
export default definePlugin({
  name: 'noop',
  description: 'Returns its input as outputs, optionally after a sleep; can be told to fail.',
  configSchema: config,
  sideEffectFree: true,
  async execute(cfg, ctx) {
    const ms = Number(cfg.sleepMs ?? 0);
    if (ms > 0) {
      await new Promise<void>((resolve, reject) => {
        const t = setTimeout(resolve, ms);
        ctx.signal.addEventListener(
          'abort',
          () => {
            clearTimeout(t);
            reject(new Error('aborted'));
          },
          { once: true },
        );
      }).catch(() => undefined);
      if (ctx.signal.aborted)
        return { status: 'failed', error: { code: 'ABORTED', message: 'step aborted', retryable: false } };
    }
    if (cfg.fail === true || cfg.fail === 'true') {
      return {
        status: 'failed',
        error: {
          code: 'NOOP_FAIL',
          message: 'told to fail',
          retryable: cfg.errorClass !== undefined ? cfg.errorClass === 'transient' : (cfg.retryable ?? false),
          ...(cfg.errorClass !== undefined ? { class: cfg.errorClass } : {}),
          ...(cfg.input !== undefined ? { input: cfg.input } : {}),
        },
      };
    }
    return {
      status: 'succeeded',
      outputs: (cfg.output ?? {}) as JsonObject,
      ...(cfg.namedStatus !== undefined ? { namedStatus: cfg.namedStatus } : {}),
    };
  },
});
