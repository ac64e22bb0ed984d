import { Module } from '@nestjs/common';
import { APP_INTERCEPTOR } from '@nestjs/core';
import { AuthCoreModule } from '../auth/auth.module';
import { LogContextInterceptor } from './log-context.interceptor';
import { MetricsController } from './metrics.controller';
import { ObservabilityRepository } from './observability.repository';
import { ObservabilityService } from './observability.service';

/**
 * `/metrics`, the span store (spans of this process into the span table) and per-request log
 * context. Every role imports it: each process serves its own metrics and stores its own spans.
 * The metrics route carries its own AuthGuard (built by Nest for this module's controller, from
 * AuthCoreModule's providers), so it is protected in processes without the api role.
 */
@Module({
  imports: [AuthCoreModule],
  controllers: [MetricsController],
  providers: [
    ObservabilityRepository,
    ObservabilityService,
    { provide: APP_INTERCEPTOR, useClass: LogContextInterceptor },
  ],
  exports: [ObservabilityService],
})
export class ObservabilityModule {}
