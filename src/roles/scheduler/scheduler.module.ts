import { Module } from '@nestjs/common';
import { EngineReaperModule } from '../../modules/engine/engine.module';
import { ObservabilityModule } from '../../modules/observability/observability.module';
import { SchedulerModule } from '../../modules/scheduler/scheduler.module';
import { WorkerSweepModule } from '../../modules/workers/workers.module';

/** The scheduler role: cron schedules, run timers, the lease reaper, the external workers' sweep. */
@Module({
  imports: [SchedulerModule, EngineReaperModule, WorkerSweepModule, ObservabilityModule],
})
export class SchedulerRoleModule {}
