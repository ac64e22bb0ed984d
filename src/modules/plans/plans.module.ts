import { Module } from '@nestjs/common';
import { OperatorAuditRepository } from './operator-audit.repository';
import { PlansController } from './plans.controller';
import { PlansRepository } from './plans.repository';
import { PlansService } from './plans.service';
import { QuotaChecks } from './quota-checks';
import { TenantLimits } from './tenant-limits';
import { TenantPlansController } from './tenant-plans.controller';
import { UsageController } from './usage.controller';

/**
 * What the limits' enforcers share: each tenant's effective limits, the operator audit log, and the
 * quota checks of stored artifacts and exports.
 */
@Module({
  providers: [TenantLimits, OperatorAuditRepository, PlansRepository, QuotaChecks],
  exports: [TenantLimits, OperatorAuditRepository, PlansRepository, QuotaChecks],
})
export class PlansCoreModule {}

/** The plans API (api role): plans and tenants' assignments for platform operators, usage for tenants. */
@Module({
  imports: [PlansCoreModule],
  controllers: [PlansController, TenantPlansController, UsageController],
  providers: [PlansService],
})
export class PlansModule {}
