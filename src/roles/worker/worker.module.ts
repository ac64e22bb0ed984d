import { Module } from '@nestjs/common';
import { EngineWorkerModule } from '../../modules/engine/engine.module';
import { ObservabilityModule } from '../../modules/observability/observability.module';

/** The worker role: claims ready steps from the per-tenant queues and runs plugins in sandboxes. */
@Module({
  imports: [EngineWorkerModule, ObservabilityModule],
})
export class WorkerRoleModule {}
