import { Module } from '@nestjs/common';
import { ArtifactsRepository } from '../artifacts/artifacts.repository';
import { PluginsModule } from '../plugins/plugins.module';
import { RunsRepository } from '../runs/runs.repository';
import { SandboxModule } from '../sandbox/sandbox.module';
import { SecretsModule } from '../secrets/secrets.module';
import { ConstraintsService } from './constraints.service';
import { EngineRepository } from './engine.repository';
import { EngineStore } from './engine.store';
import { JobRunnerService } from './job-runner.service';
import { ReaperService } from './reaper.service';
import { WorkerService } from './worker.service';

/** The engine's transactions and its graphile-worker jobs (retry timers, webhooks); shared by the worker and scheduler roles. */
@Module({
  imports: [SandboxModule],
  providers: [EngineRepository, RunsRepository, ArtifactsRepository, EngineStore, ConstraintsService, JobRunnerService],
  exports: [EngineRepository, RunsRepository, ArtifactsRepository, EngineStore, ConstraintsService],
})
export class EngineCoreModule {}

/** The worker role's engine: claims and runs steps (secrets resolved at call time). */
@Module({
  imports: [EngineCoreModule, PluginsModule, SecretsModule, SandboxModule],
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
