import { Module } from '@nestjs/common';
import { AuthModule } from '../auth/auth.module';
import { ConstraintsModule, EngineStoreModule } from '../engine/engine.module';
import { RunsCoreModule } from '../runs/runs.module';
import { SecretsCoreModule } from '../secrets/secrets.module';
import { PlansCoreModule } from '../plans/plans.module';
import { PluginsModule } from '../plugins/plugins.module';
import { SandboxModule } from '../sandbox/sandbox.module';
import { QueueHandOver } from './queue-hand-over';
import { ReputationBook } from './reputation-book';
import { TaskInbox } from './task-inbox';
import { TasksService } from './tasks.service';
import { WorkerChannelGateway } from './worker-channel.gateway';
import { WorkerDirectory } from './worker-directory';
import { WorkerLiveness } from './worker-liveness';
import { WorkerSweepService } from './worker-sweep.service';
import { WorkersController } from './workers.controller';
import { WorkersRepository } from './workers.repository';
import { WorkersService } from './workers.service';

/**
 * What both sides of the external workers share: their tables and their tasks' ends, and the
 * hand-over of the queue steps their results make ready (a StepExecutor of this process's own).
 */
@Module({
  imports: [
    EngineStoreModule,
    ConstraintsModule,
    RunsCoreModule,
    SecretsCoreModule,
    PluginsModule,
    SandboxModule,
    PlansCoreModule,
  ],
  providers: [
    WorkersRepository,
    TaskInbox,
    WorkerDirectory,
    WorkerLiveness,
    ReputationBook,
    TasksService,
    QueueHandOver,
  ],
  exports: [WorkersRepository, TaskInbox, WorkerDirectory, WorkerLiveness, ReputationBook, TasksService],
})
export class WorkersCoreModule {}

/** The api role's worker protocol (REST and the channel) and the tenant's view of its workers. */
@Module({
  imports: [WorkersCoreModule, AuthModule],
  controllers: [WorkersController],
  providers: [WorkersService, WorkerChannelGateway],
})
export class WorkersModule {}

/** The scheduler role's duty: workers past their TTL, tasks past their deadlines, lost wake-ups. */
@Module({
  imports: [WorkersCoreModule],
  providers: [WorkerSweepService],
})
export class WorkerSweepModule {}
