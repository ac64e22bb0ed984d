import { Module } from '@nestjs/common';
import { PluginsModule } from '../plugins/plugins.module';
import { TrustModule } from '../trust/trust.module';
import { DagsController } from './dags.controller';
import { DagsRepository } from './dags.repository';
import { DagsService } from './dags.service';

/** Published DAG versions, without the routes: runs and schedules resolve their DAGs through it. */
@Module({
  providers: [DagsRepository],
  exports: [DagsRepository],
})
export class DagsCoreModule {}

/** The DAGs API: publishing (validated against the plugins and the signing policy) and reads. */
@Module({
  imports: [DagsCoreModule, PluginsModule, TrustModule],
  controllers: [DagsController],
  providers: [DagsService],
  exports: [DagsCoreModule, DagsService],
})
export class DagsModule {}
