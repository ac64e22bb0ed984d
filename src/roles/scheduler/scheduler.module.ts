import { Module } from '@nestjs/common';
import { SchedulerModule } from '../../modules/scheduler/scheduler.module';

/** The scheduler role: cron schedules, run timers, lease reaper, retention. */
@Module({
  imports: [SchedulerModule],
})
export class SchedulerRoleModule {}
