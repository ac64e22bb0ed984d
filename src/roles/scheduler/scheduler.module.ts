import { Module } from '@nestjs/common';

/** The scheduler role: cron schedules, run timers, lease reaper, retention. */
@Module({
  imports: [],
})
export class SchedulerRoleModule {}
