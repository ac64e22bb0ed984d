import { Module } from '@nestjs/common';
import { PluginsModule } from '../plugins/plugins.module';
import { DagsController } from './dags.controller';
import { DagsRepository } from './dags.repository';
import { DagsService } from './dags.service';

@Module({
  imports: [PluginsModule],
  controllers: [DagsController],
  providers: [DagsRepository, DagsService],
  exports: [DagsRepository, DagsService],
})
export class DagsModule {}
