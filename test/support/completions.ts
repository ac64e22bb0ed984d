import type { JsonObject } from '../../src/modules/plugins/plugin';
import { completionFor, type ClaimedWork, type Completion } from '../../src/modules/engine/engine.store';

/** The result a worker reports for claimed work that succeeded (engine tests). */
export function succeeded(
  w: Pick<ClaimedWork, 'tenantId' | 'runId' | 'stepId' | 'attempt' | 'epoch'>,
  workerId = 'w',
  outputs: JsonObject = {},
): Completion {
  return completionFor(w, workerId, { status: 'succeeded', outputs, logs: [] }, new Date(), new Date());
}
