import { Module } from '@nestjs/common';
import type { OrdoConfig } from '../../core/config/config';
import { ORDO_CONFIG } from '../../core/config/config.module';
import { DagsRepository } from '../dags/dags.repository';
import { Clock, clockFromConfig } from './clock';
import { SchedulesController } from './schedules.controller';
import { SchedulesRepository } from './schedules.repository';
import { SchedulesService } from './schedules.service';

/** The schedules API: definitions, pause/resume, fire-time previews. */
@Module({
  controllers: [SchedulesController],
  providers: [
    SchedulesService,
    SchedulesRepository,
    DagsRepository,
    { provide: Clock, useFactory: (config: OrdoConfig) => clockFromConfig(config), inject: [ORDO_CONFIG] },
  ],
  exports: [SchedulesRepository],
})
export class SchedulesModule {}
