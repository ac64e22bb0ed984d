import { Module } from '@nestjs/common';
import { EngineReaperModule } from '../../modules/engine/engine.module';
import { ObservabilityModule } from '../../modules/observability/observability.module';
import { RetentionModule } from '../../modules/retention/retention.module';
import { SchedulerModule } from '../../modules/scheduler/scheduler.module';
import { WorkerSweepModule } from '../../modules/workers/workers.module';

/** The scheduler role: cron schedules, run timers, the lease reaper, the external workers' sweep, retention. */
@Module({
  imports: [SchedulerModule, EngineReaperModule, WorkerSweepModule, ObservabilityModule, RetentionModule],
})
export class SchedulerRoleModule {}
