import { Module } from '@nestjs/common';
import { APP_INTERCEPTOR } from '@nestjs/core';
import { LogContextInterceptor } from './log-context.interceptor';
import { MetricsController } from './metrics.controller';
import { ObservabilityRepository } from './observability.repository';
import { ObservabilityService } from './observability.service';

/** `/metrics`, the span store (spans of this process into the span table) and per-request log context. */
@Module({
  controllers: [MetricsController],
  providers: [
    ObservabilityRepository,
    ObservabilityService,
    { provide: APP_INTERCEPTOR, useClass: LogContextInterceptor },
  ],
  exports: [ObservabilityService],
})
export class ObservabilityModule {}
