import { Module } from '@nestjs/common';
import { PolicyController, TrustKeysController } from './trust.controller';
import { TrustRepository } from './trust.repository';
import { TrustService } from './trust.service';

/** Trust store of signing keys and the tenant signing policy. */
@Module({
  controllers: [TrustKeysController, PolicyController],
  providers: [TrustRepository, TrustService],
  exports: [TrustService],
})
export class TrustModule {}
