import { Module } from '@nestjs/common';
import { ArtifactsCoreModule } from '../artifacts/artifacts.module';
import { PlansCoreModule } from '../plans/plans.module';
import { PluginsModule } from '../plugins/plugins.module';
import { RunsCoreModule } from '../runs/runs.module';
import { SandboxModule } from '../sandbox/sandbox.module';
import { SecretsCoreModule } from '../secrets/secrets.module';
import { ApprovalsService } from './approvals.service';
import { ConstraintsService } from './constraints.service';
import { EngineRepository } from './engine.repository';
import { EngineStore } from './engine.store';
import { JobRunnerService } from './job-runner.service';
import { PreconditionsService } from './preconditions.service';
import { ReaperService } from './reaper.service';
import { SignalsRepository } from './signals.repository';
import { SignalsService } from './signals.service';
import { SubDagsRepository } from './sub-dags.repository';
import { SubDagsService } from './sub-dags.service';
import { WorkerService } from './worker.service';

/**
 * The engine's statements, and what resumes waiting steps: decisions and signals (the API takes
 * them, the job runner their timeouts) and child runs (started by workers, their ends handled by
 * the job runner).
 */
@Module({
  imports: [RunsCoreModule, ArtifactsCoreModule],
  providers: [
    EngineRepository,
    EngineStore,
    ApprovalsService,
    SignalsRepository,
    SignalsService,
    SubDagsRepository,
    SubDagsService,
  ],
  exports: [EngineRepository, EngineStore, ApprovalsService, SignalsService, SubDagsService],
})
export class EngineStoreModule {}

/** What a step's run-time constraints do when breached: one service for every StepExecutor of a process. */
@Module({
  imports: [EngineStoreModule, SandboxModule, RunsCoreModule],
  providers: [ConstraintsService],
  exports: [ConstraintsService],
})
export class ConstraintsModule {}

/** The engine's transactions and its graphile-worker jobs (retry timers, webhooks, timeouts, precondition checks); shared by the worker and scheduler roles. */
@Module({
  imports: [EngineStoreModule, SandboxModule, RunsCoreModule, ConstraintsModule],
  providers: [PreconditionsService, JobRunnerService],
  exports: [EngineStoreModule, ConstraintsModule],
})
export class EngineCoreModule {}

/** The worker role's engine: claims and runs steps (secrets resolved at call time). */
@Module({
  imports: [EngineCoreModule, PluginsModule, SecretsCoreModule, SandboxModule, PlansCoreModule],
  providers: [WorkerService],
  exports: [WorkerService],
})
export class EngineWorkerModule {}

/** The scheduler role's engine duty: the lease reaper. */
@Module({
  imports: [EngineCoreModule],
  providers: [ReaperService],
  exports: [ReaperService],
})
export class EngineReaperModule {}
