import { Module } from '@nestjs/common';
import { EngineReaperModule } from '../../modules/engine/engine.module';
import { SchedulerModule } from '../../modules/scheduler/scheduler.module';

/** The scheduler role: cron schedules, run timers, lease reaper, retention. */
@Module({
  imports: [SchedulerModule, EngineReaperModule],
})
export class SchedulerRoleModule {}
