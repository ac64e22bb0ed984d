import { Module } from '@nestjs/common';
import { DagsRepository } from '../dags/dags.repository';
import { Clock, clockFromEnv } from './clock';
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
    { provide: Clock, useFactory: () => clockFromEnv() },
  ],
  exports: [SchedulesRepository],
})
export class SchedulesModule {}
