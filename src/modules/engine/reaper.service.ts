import { Inject, Injectable, Logger, type OnApplicationBootstrap, type OnApplicationShutdown } from '@nestjs/common';
import { ORDO_CONFIG } from '../../core/config/config.module';
import type { OrdoConfig } from '../../core/config/config';
import { recordReaperPassCompleted, recordStepsOrphaned } from '../../core/telemetry/metrics';
import { EngineStore } from './engine.store';

/**
 * The lease reaper (scheduler role): every ORDO_REAPER_INTERVAL_MS it takes expired leases with
 * FOR UPDATE SKIP LOCKED (so any number of replicas can run it), marks their attempts orphaned and
 * retries or fails their steps. A live worker's lease never expires, so its step is never taken.
 */
@Injectable()
export class ReaperService implements OnApplicationBootstrap, OnApplicationShutdown {
  private readonly log = new Logger('reaper');
  private timer: NodeJS.Timeout | null = null;
  private busy: Promise<void> | null = null;
  private readonly intervalMs: number;

  constructor(
    @Inject(ORDO_CONFIG) config: OrdoConfig,
    private readonly store: EngineStore,
  ) {
    this.intervalMs = config.ORDO_REAPER_INTERVAL_MS;
  }

  onApplicationBootstrap(): void {
    this.timer = setInterval(() => {
      if (!this.busy) this.busy = this.sweep().finally(() => (this.busy = null));
    }, this.intervalMs);
  }

  async onApplicationShutdown(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    await this.busy;
  }

  /**
   * Reaps until no expired lease is left. Orphaned attempts are counted as each batch commits; the
   * pass is recorded as completed (orchestrator_reaper_last_success_timestamp_seconds) only when it
   * found no expired lease left, so a failing or never-ending pass shows as reaper lag.
   */
  async sweep(): Promise<void> {
    try {
      for (let n = await this.store.reap(); n > 0; n = await this.store.reap()) {
        recordStepsOrphaned(n);
        this.log.log({ orphaned: n }, 'orphaned expired attempts');
      }
      recordReaperPassCompleted();
    } catch (e) {
      this.log.error({ err: e }, 'reaper sweep failed');
    }
  }
}
