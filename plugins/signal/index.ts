import { z } from 'zod';
import { duration } from '../../src/modules/dags/dag-definition';
import { definePlugin } from '../../src/modules/plugins/plugin';
import { CORRELATION_KEY, SIGNAL_NAME } from '../../src/modules/engine/signal-names';

const config = z.strictObject({
  /** The signal's name (`payment.settled`). */
  name: z.string().regex(SIGNAL_NAME, 'a signal name: letters, digits, ".", "_", ":" or "-", up to 200'),
  /**
   * Which signal of that name this step waits for (`${{ inputs.orderId }}`): templated from inputs
   * and upstream outputs when the step runs, then 1 to 500 characters with no control character.
   */
  correlationKey: z.string().regex(CORRELATION_KEY, 'a correlation key: 1 to 500 characters, no control character'),
  /** How long to wait for the signal; then `defaultPayload` applies, or the step fails (SIGNAL_TIMEOUT). */
  timeout: duration.optional(),
  /** The payload the step succeeds with when its timeout passes with no signal (taken as written). */
  defaultPayload: z.unknown().optional(),
});

/**
 * Waits for a signal: the step is handed back as waiting (it holds no worker slot and no lease)
 * until a signal with its name and correlation key is posted (POST /api/v1/signals), or was kept
 * from before, or its timeout passes. It succeeds with outputs `{payload, signalId, receivedAt}`.
 */
export default definePlugin({
  name: 'signal',
  description: 'Waits for a signal (name and correlation key) posted through the API, with an optional timeout.',
  configSchema: config,
  waitFor: (cfg) => ({
    kind: 'signal',
    name: cfg.name,
    correlationKey: cfg.correlationKey,
    ...(cfg.timeout !== undefined ? { timeoutMs: cfg.timeout } : {}),
    ...(cfg.defaultPayload !== undefined ? { hasDefault: true } : {}),
  }),
  // A signal step is resumed by its signal, never run (the worker asks waitFor instead).
  execute: () =>
    Promise.resolve({
      status: 'failed' as const,
      error: { code: 'SIGNAL_NOT_RUNNABLE', message: 'a signal step waits for a signal', retryable: false },
    }),
});
