import { Module } from '@nestjs/common';
import { RunsCoreModule } from '../runs/runs.module';
import { DeadLetterController } from './deadletter.controller';
import { DeadLetterRepository } from './deadletter.repository';
import { DeadLetterService } from './deadletter.service';

/** The tenant's dead-letter routes: list, inspect, requeue (a rerun from the failed step), discard. */
@Module({
  imports: [RunsCoreModule],
  controllers: [DeadLetterController],
  providers: [DeadLetterRepository, DeadLetterService],
})
export class DeadLetterModule {}
