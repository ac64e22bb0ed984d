import { Module } from '@nestjs/common';
import { RunsCoreModule } from '../runs/runs.module';
import { RunsScheduleRunner } from './runs-schedule-runner';
import { ScheduleRunner } from './schedule-runner';
import { SchedulerLoop } from './scheduler-loop';
import { SchedulesCoreModule } from './schedules.module';

/**
 * The scheduler loop. Runs are created through RunsCoreModule's RunsService, without the runs
 * controller: a scheduler-only process serves no run routes.
 */
@Module({
  imports: [SchedulesCoreModule, RunsCoreModule],
  providers: [SchedulerLoop, { provide: ScheduleRunner, useClass: RunsScheduleRunner }],
  exports: [SchedulerLoop],
})
export class SchedulerModule {}
