import { Module } from '@nestjs/common';
import { PluginsModule } from '../plugins/plugins.module';
import { TrustModule } from '../trust/trust.module';
import { DagsController } from './dags.controller';
import { DagsRepository } from './dags.repository';
import { DagsService } from './dags.service';

@Module({
  imports: [PluginsModule, TrustModule],
  controllers: [DagsController],
  providers: [DagsRepository, DagsService],
  exports: [DagsRepository, DagsService],
})
export class DagsModule {}
