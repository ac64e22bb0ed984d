import { Module } from '@nestjs/common';
import { PlansCoreModule } from '../plans/plans.module';
import { AuditExportService } from './audit-export.service';
import { AuditLogRepository } from './audit-log.repository';
import { ExportController } from './export.controller';
import { ExportRepository } from './export.repository';
import { ExportService } from './export.service';

/**
 * The signed NDJSON audit export (`GET /api/v1/export`, `ordo export`), and the operator audit
 * log's (its routes are the admin module's).
 */
@Module({
  imports: [PlansCoreModule],
  controllers: [ExportController],
  providers: [ExportRepository, ExportService, AuditLogRepository, AuditExportService],
  exports: [ExportService, AuditLogRepository, AuditExportService],
})
export class ExportModule {}
