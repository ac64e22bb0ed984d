import { Module } from '@nestjs/common';
import { DagsModule } from '../dags/dags.module';
import { TrustModule } from '../trust/trust.module';
import { BundlesController } from './bundles.controller';
import { BundlesRepository } from './bundles.repository';
import { BundlesService } from './bundles.service';

/** Signed offline bundles: import (API and CLI), listing, and the scripts they ship. */
@Module({
  imports: [DagsModule, TrustModule],
  controllers: [BundlesController],
  providers: [BundlesRepository, BundlesService],
  exports: [BundlesService],
})
export class BundlesModule {}
