import { Module } from '@nestjs/common';
import { OperatorAuditRepository } from './operator-audit.repository';
import { TenantLimits } from './tenant-limits';

/** What the limits' enforcers share: each tenant's effective limits and the operator audit log. */
@Module({
  providers: [TenantLimits, OperatorAuditRepository],
  exports: [TenantLimits, OperatorAuditRepository],
})
export class PlansCoreModule {}
