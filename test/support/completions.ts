import type { JsonObject } from '../../src/modules/plugins/plugin';
import type { ClaimedWork, Completion } from '../../src/modules/engine/engine.store';

/** The result a worker reports for claimed work that succeeded (engine tests). */
export function succeeded(
  w: Pick<ClaimedWork, 'tenantId' | 'runId' | 'stepId' | 'attempt' | 'epoch'>,
  workerId = 'w',
  outputs: JsonObject = {},
): Completion {
  return {
    tenantId: w.tenantId,
    runId: w.runId,
    stepId: w.stepId,
    attempt: w.attempt,
    epoch: w.epoch,
    workerId,
    outcome: { status: 'succeeded', outputs, logs: [] },
    startedAt: new Date(),
    finishedAt: new Date(),
  };
}
