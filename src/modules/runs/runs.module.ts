import { Module } from '@nestjs/common';
import { DagsRepository } from '../dags/dags.repository';
import { RunsController } from './runs.controller';
import { RunsRepository } from './runs.repository';
import { RunsService } from './runs.service';

@Module({
  controllers: [RunsController],
  providers: [RunsRepository, RunsService, DagsRepository],
  exports: [RunsRepository, RunsService],
})
export class RunsModule {}
