import { Module } from '@nestjs/common';
import { EngineReaperModule } from '../../modules/engine/engine.module';
import { ObservabilityModule } from '../../modules/observability/observability.module';
import { SchedulerModule } from '../../modules/scheduler/scheduler.module';

/** The scheduler role: cron schedules, run timers, the lease reaper. */
@Module({
  imports: [SchedulerModule, EngineReaperModule, ObservabilityModule],
})
export class SchedulerRoleModule {}
