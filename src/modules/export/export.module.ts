import { Module } from '@nestjs/common';
import { ExportController } from './export.controller';
import { ExportRepository } from './export.repository';
import { ExportService } from './export.service';

/** The signed NDJSON audit export (`GET /api/v1/export`, `ordo export`). */
@Module({
  controllers: [ExportController],
  providers: [ExportRepository, ExportService],
  exports: [ExportService],
})
export class ExportModule {}
