import { Module } from '@nestjs/common';
import { PlansCoreModule } from '../plans/plans.module';
import { ExportController } from './export.controller';
import { ExportRepository } from './export.repository';
import { ExportService } from './export.service';

/** The signed NDJSON audit export (`GET /api/v1/export`, `ordo export`). */
@Module({
  imports: [PlansCoreModule],
  controllers: [ExportController],
  providers: [ExportRepository, ExportService],
  exports: [ExportService],
})
export class ExportModule {}
