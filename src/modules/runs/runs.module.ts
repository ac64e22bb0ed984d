import { Module } from '@nestjs/common';
import { DagsCoreModule } from '../dags/dags.module';
import { RateLimitCoreModule } from '../plans/rate-limit.module';
import { RunExplainRepository } from './run-explain.repository';
import { RunExplainService } from './run-explain.service';
import { RunsController } from './runs.controller';
import { RunsRepository } from './runs.repository';
import { RunsService } from './runs.service';

/**
 * Runs without the routes: the process's one RunsService (its creation batcher and DAG version
 * cache), used by the API and the scheduler, and the run rows the engine writes.
 */
@Module({
  imports: [DagsCoreModule, RateLimitCoreModule],
  providers: [RunsRepository, RunsService, RunExplainRepository, RunExplainService],
  exports: [RunsRepository, RunsService, RunExplainService],
})
export class RunsCoreModule {}

/** The runs API. */
@Module({
  imports: [RunsCoreModule],
  controllers: [RunsController],
  exports: [RunsCoreModule],
})
export class RunsModule {}
