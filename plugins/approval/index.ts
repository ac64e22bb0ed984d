import { z } from 'zod';
import { duration } from '../../src/modules/dags/dag-definition';
import { definePlugin } from '../../src/modules/plugins/plugin';

const config = z.strictObject({
  /** What the people who decide are asked (shown with the waiting step). */
  message: z.string().max(2000).optional(),
  /** Token subjects that may decide (default: any token with orchestrator:write on the tenant). */
  subjects: z.array(z.string().min(1).max(200)).min(1).max(100).optional(),
  /** How long to wait for a decision; then `defaultDecision` applies, or the step fails (APPROVAL_TIMEOUT). */
  timeout: duration.optional(),
  defaultDecision: z.enum(['approved', 'rejected']).optional(),
});

/**
 * Waits for a person: the step is handed back as waiting (it holds no worker slot and no lease)
 * until a decision is posted (POST /api/v1/runs/{runId}/steps/{stepId}/decision) or its timeout
 * passes. It succeeds with the decision as its named status (`approved` or `rejected`) and
 * outputs `{decision, comment, decidedBy}`.
 */
export default definePlugin({
  name: 'approval',
  description:
    'Waits for an approval decision (approved or rejected) posted through the API, with an optional timeout.',
  configSchema: config,
  waitFor: (cfg) => ({
    kind: 'approval',
    ...(cfg.timeout !== undefined ? { timeoutMs: cfg.timeout } : {}),
    ...(cfg.defaultDecision !== undefined ? { defaultDecision: cfg.defaultDecision } : {}),
  }),
  // An approval step is resumed by its decision, never run (the worker asks waitFor instead).
  execute: () =>
    Promise.resolve({
      status: 'failed' as const,
      error: { code: 'APPROVAL_NOT_RUNNABLE', message: 'an approval step waits for a decision', retryable: false },
    }),
});
