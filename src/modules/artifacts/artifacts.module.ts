import { Module } from '@nestjs/common';
import { ArtifactsController } from './artifacts.controller';
import { ArtifactsRepository } from './artifacts.repository';
import { ArtifactsService } from './artifacts.service';

/** Artifact rows, without the routes: the engine stores step outputs through it. */
@Module({
  providers: [ArtifactsRepository],
  exports: [ArtifactsRepository],
})
export class ArtifactsCoreModule {}

/** The artifacts API. */
@Module({
  imports: [ArtifactsCoreModule],
  controllers: [ArtifactsController],
  providers: [ArtifactsService],
  exports: [ArtifactsCoreModule],
})
export class ArtifactsModule {}
