import { recordRunFinished, recordStepRetry } from './metrics';
import { recordRunSpan } from './tracing';

/** A run event as the engine appends it (only the fields observation needs). */
export interface ObservedEvent {
  tenantId: string;
  runId: string;
  type: string;
}

export interface ObservedRun {
  dagId: string;
  traceId: string;
  startedAt: Date | null;
}

const TERMINAL = new Set(['run.succeeded', 'run.failed', 'run.cancelled']);

/**
 * Call after the transaction that appended `events` committed: counts finished runs (with their
 * duration) and step retries, and records each finished run's `orchestrator.run` span. A run that
 * started in the same transaction counts as started at `now`.
 */
export function observeCommittedEvents(
  events: readonly ObservedEvent[],
  runOf: (tenantId: string, runId: string) => ObservedRun | undefined,
  now: Date,
): void {
  const startedHere = new Set<string>();
  for (const e of events) {
    if (e.type === 'run.running') startedHere.add(`${e.tenantId}/${e.runId}`);
    else if (e.type === 'step.retrying') recordStepRetry(e.tenantId);
    else if (TERMINAL.has(e.type)) {
      const run = runOf(e.tenantId, e.runId);
      const status = e.type.slice('run.'.length);
      const startedAt = run?.startedAt ?? (startedHere.has(`${e.tenantId}/${e.runId}`) ? now : null);
      recordRunFinished(e.tenantId, status, startedAt, now);
      if (run) {
        recordRunSpan(
          { tenant: e.tenantId, dagId: run.dagId, runId: e.runId, traceId: run.traceId, status },
          startedAt ?? now,
          now,
        );
      }
    }
  }
}
