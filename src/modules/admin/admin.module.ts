import { Module } from '@nestjs/common';
import { ExportModule } from '../export/export.module';
import { AdminController } from './admin.controller';
import { AdminRepository } from './admin.repository';
import { AdminService } from './admin.service';

/** Platform operator routes under /api/v1/admin: the tenants' queues and the operator audit log. */
@Module({
  imports: [ExportModule],
  controllers: [AdminController],
  providers: [AdminRepository, AdminService],
})
export class AdminModule {}
