import type { JsonObject } from '../../src/core/json/json-value';
import type { ChainedEvent } from '../../src/modules/runs/run-events';

/** A run_event row as pg reads it (`select RUN_EVENT_COLUMNS from run_event`). */
export interface RunEventRow {
  tenant_id: string;
  run_id: string;
  seq: number;
  created_at: Date;
  type: string;
  step_id: string | null;
  attempt: number | null;
  actor: string;
  data: JsonObject;
  prev_hash: string;
  hash: string;
}

export const RUN_EVENT_COLUMNS =
  'tenant_id, run_id, seq, created_at, type, step_id, attempt, actor, data, prev_hash, hash';

/** A stored event as the chain hashes it (verifyChain). */
export function chainedEvent(e: RunEventRow): ChainedEvent {
  return {
    tenantId: e.tenant_id,
    runId: e.run_id,
    seq: e.seq,
    createdAt: e.created_at.toISOString(),
    type: e.type,
    stepId: e.step_id,
    attempt: e.attempt,
    actor: e.actor,
    data: e.data,
    prevHash: e.prev_hash,
    hash: e.hash,
  };
}
