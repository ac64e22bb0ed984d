/** What a fire asks of the runs module. */
export interface ScheduledRunRequest {
  dagId: string;
  version?: number;
  inputs: Record<string, unknown>;
  /** Deterministic: schedule:<scheduleId>:<fireTimeUtc ISO>; creating twice yields the same run. */
  runToken: string;
  requestedBy: string;
}

/**
 * The scheduler's view of runs, within one tenant. The scheduler never writes runs itself: it
 * asks the runs module, which is idempotent on the run token.
 */
export abstract class ScheduleRunner {
  abstract createRun(tenantId: string, req: ScheduledRunRequest): Promise<{ runId: string; created: boolean }>;
  /** Creates several runs in one transaction, results in request order; all or none. */
  abstract createRuns(tenantId: string, reqs: ScheduledRunRequest[]): Promise<{ runId: string; created: boolean }[]>;
  /** True while the run is queued or running. */
  abstract isActive(tenantId: string, runId: string): Promise<boolean>;
  abstract cancel(tenantId: string, runId: string, reason: string): Promise<void>;
}

/** The deterministic run token of a schedule's fire time. */
export function scheduleRunToken(scheduleId: string, fireTime: Date): string {
  return `schedule:${scheduleId}:${fireTime.toISOString()}`;
}
