import { Module } from '@nestjs/common';
import { EngineStoreModule } from '../engine/engine.module';
import { ApprovalsController } from './approvals.controller';
import { SignalsController } from './signals.controller';

/** Flow routes that act on a run's steps through the engine: decisions on approval steps, signals. */
@Module({
  imports: [EngineStoreModule],
  controllers: [ApprovalsController, SignalsController],
})
export class FlowModule {}
