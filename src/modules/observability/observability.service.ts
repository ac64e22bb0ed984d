import { Inject, Injectable, type OnModuleDestroy, type OnModuleInit } from '@nestjs/common';
import type { OrdoConfig } from '../../core/config/config';
import { ORDO_CONFIG } from '../../core/config/config.module';
import { Database } from '../../core/database/database';
import { checkReadiness } from '../../core/database/readiness';
import { rootLogger } from '../../core/logging/logger';
import { registry } from '../../core/telemetry/metrics';
import { attachSpanProcessor } from '../../core/telemetry/tracing';
import { ObservabilityRepository } from './observability.repository';
import { LimitHitsTally, setQueueGauges } from './queue-metrics';
import { SpanStore } from './span-store';

/** Renders the process's Prometheus metrics and stores this process's finished spans. */
@Injectable()
export class ObservabilityService implements OnModuleInit, OnModuleDestroy {
  private store?: SpanStore;
  private detach?: () => void;
  private readonly hits = new LimitHitsTally(new Date());
  private scraping: Promise<unknown> = Promise.resolve();
  private readonly log = rootLogger().child({ component: 'metrics' });

  constructor(
    private readonly db: Database,
    private readonly repo: ObservabilityRepository,
    @Inject(ORDO_CONFIG) private readonly config: OrdoConfig,
  ) {}

  onModuleInit(): void {
    this.store = new SpanStore(this.db.system, this.repo, rootLogger().child({ component: 'span-store' }));
    this.detach = attachSpanProcessor(this.store);
  }

  async onModuleDestroy(): Promise<void> {
    this.detach?.();
    await this.store?.flush();
  }

  /** Writes buffered spans now (tests and shutdown). */
  async flushSpans(): Promise<void> {
    await this.store?.flush();
  }

  /**
   * Prometheus text. The readiness check, the queue gauges and the limit hits are read from the
   * database at scrape time (the migration records, one grouped scan of the hot queue, one range of
   * limit_hit); scrapes run one at a time, so a reading of the hits is added once. When the database
   * cannot be read the process's own metrics are still served, with orchestrator_database_ready 0
   * and no queue gauges (an unknown depth is not reported as a stale one).
   */
  scrape(): Promise<{ contentType: string; body: string }> {
    const next = this.scraping.then(() => this.render());
    this.scraping = next.catch(() => undefined);
    return next;
  }

  private async render(): Promise<{ contentType: string; body: string }> {
    const n = this.config.ORDO_METRICS_TOP_TENANTS;
    const { checks } = await checkReadiness(this.db);
    try {
      if (checks.database !== 'ok') throw new Error(checks.database);
      setQueueGauges(await this.repo.readyQueues(this.db.system), n);
      const { rows, now } = await this.repo.limitHitsSince(this.db.system, this.hits.readFrom());
      this.hits.apply(rows, now, n);
    } catch (e) {
      setQueueGauges([], n);
      this.log.warn({ err: e }, 'metrics: database readings skipped');
    }
    return { contentType: registry.contentType, body: await registry.metrics() };
  }
}
