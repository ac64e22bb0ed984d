import { Injectable, type OnModuleDestroy, type OnModuleInit } from '@nestjs/common';
import { Database } from '../../core/database/database';
import { rootLogger } from '../../core/logging/logger';
import { registry, setQueueDepths } from '../../core/telemetry/metrics';
import { attachSpanProcessor } from '../../core/telemetry/tracing';
import { ObservabilityRepository } from './observability.repository';
import { SpanStore } from './span-store';

/** Renders the process's Prometheus metrics and stores this process's finished spans. */
@Injectable()
export class ObservabilityService implements OnModuleInit, OnModuleDestroy {
  private store?: SpanStore;
  private detach?: () => void;

  constructor(
    private readonly db: Database,
    private readonly repo: ObservabilityRepository,
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

  /** Prometheus text: the queue depth gauge is read from the database (one grouped query) at scrape time. */
  async scrape(): Promise<{ contentType: string; body: string }> {
    setQueueDepths(await this.repo.queueDepths(this.db.system));
    return { contentType: registry.contentType, body: await registry.metrics() };
  }
}
