import { recordLeaseRenewalFailures } from '../../core/telemetry/metrics';
import type { StepKey } from './engine.repository';
import { stepKey } from './running-step';

export interface LeaseKeeperOptions {
  /** Extends the leases of `items` (EngineStore.heartbeat); answers the steps still held. */
  heartbeat(items: (StepKey & { epoch: number })[]): Promise<StepKey[]>;
  /** The steps this worker holds leases for (running, and claimed but not started). */
  held(): Iterable<StepKey & { epoch: number }>;
  /** Steps whose lease another worker or the reaper took: theirs to stop or drop. */
  lost(keys: Set<string>): void;
  intervalMs: number;
  log: { warn(obj: object, msg: string): void };
}

/**
 * Extends the worker's leases in one statement every interval, and reports the ones it lost. Leases
 * a beat did not extend are counted in orchestrator_lease_renewal_failures_total: all of them when
 * the statement failed (reason error), the ones no longer held otherwise (reason lost).
 */
export class LeaseKeeper {
  private timer: NodeJS.Timeout | null = null;

  constructor(private readonly o: LeaseKeeperOptions) {}

  start(): void {
    this.timer = setInterval(() => void this.beat(), this.o.intervalMs);
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }

  async beat(): Promise<void> {
    const items = [...this.o.held()].map((w) => ({
      tenantId: w.tenantId,
      runId: w.runId,
      stepId: w.stepId,
      epoch: w.epoch,
    }));
    if (items.length === 0) return;
    try {
      const held = new Set((await this.o.heartbeat(items)).map(stepKey));
      const lost = new Set(items.map(stepKey).filter((k) => !held.has(k)));
      if (lost.size > 0) {
        recordLeaseRenewalFailures('lost', lost.size);
        this.o.lost(lost);
      }
    } catch (e) {
      recordLeaseRenewalFailures('error', items.length);
      this.o.log.warn({ err: e }, 'heartbeat failed');
    }
  }
}
