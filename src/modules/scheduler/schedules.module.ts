import { Module } from '@nestjs/common';
import type { OrdoConfig } from '../../core/config/config';
import { ORDO_CONFIG } from '../../core/config/config.module';
import { DagsCoreModule } from '../dags/dags.module';
import { Clock, clockFromConfig } from './clock';
import { SchedulesController } from './schedules.controller';
import { SchedulesRepository } from './schedules.repository';
import { SchedulesService } from './schedules.service';

/** Schedule rows and the process's scheduler clock, shared by the schedules API and the scheduler loop. */
@Module({
  providers: [
    SchedulesRepository,
    { provide: Clock, useFactory: (config: OrdoConfig) => clockFromConfig(config), inject: [ORDO_CONFIG] },
  ],
  exports: [SchedulesRepository, Clock],
})
export class SchedulesCoreModule {}

/** The schedules API: definitions, pause/resume, fire-time previews. */
@Module({
  imports: [SchedulesCoreModule, DagsCoreModule],
  controllers: [SchedulesController],
  providers: [SchedulesService],
  exports: [SchedulesCoreModule],
})
export class SchedulesModule {}
