import { Module } from '@nestjs/common';
import { EngineStoreModule } from '../engine/engine.module';
import { ApprovalsController } from './approvals.controller';

/** Flow routes that act on a run's steps through the engine: decisions on approval steps. */
@Module({
  imports: [EngineStoreModule],
  controllers: [ApprovalsController],
})
export class FlowModule {}
