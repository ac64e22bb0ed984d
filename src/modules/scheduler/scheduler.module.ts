import { Module } from '@nestjs/common';
import type { OrdoConfig } from '../../core/config/config';
import { ORDO_CONFIG } from '../../core/config/config.module';
import { DagsRepository } from '../dags/dags.repository';
import { RunsRepository } from '../runs/runs.repository';
import { RunsService } from '../runs/runs.service';
import { Clock, clockFromConfig } from './clock';
import { RunsScheduleRunner } from './runs-schedule-runner';
import { ScheduleRunner } from './schedule-runner';
import { SchedulerLoop } from './scheduler-loop';
import { SchedulesRepository } from './schedules.repository';

/**
 * The scheduler loop. Runs are created through RunsService provided here without the runs
 * controller: a scheduler-only process serves no run routes.
 */
@Module({
  providers: [
    SchedulerLoop,
    SchedulesRepository,
    RunsService,
    RunsRepository,
    DagsRepository,
    { provide: ScheduleRunner, useClass: RunsScheduleRunner },
    { provide: Clock, useFactory: (config: OrdoConfig) => clockFromConfig(config), inject: [ORDO_CONFIG] },
  ],
  exports: [SchedulerLoop],
})
export class SchedulerModule {}
