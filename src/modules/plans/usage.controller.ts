import { Controller, Get } from '@nestjs/common';
import { TenantPrincipal, type TenantPrincipalT } from '../../core/http/request-context';
import { Route } from '../../core/http/route-spec';
import { usageSchema } from './plans.dto';
import { PlansService } from './plans.service';

@Controller('api/v1/usage')
export class UsageController {
  constructor(private readonly plans: PlansService) {}

  @Get()
  @Route({
    operationId: 'getUsage',
    summary: "This tenant's plan, limits, current use and quota period (when the monthly run count resets)",
    tags: ['plans'],
    access: 'orchestrator:read',
    responses: { 200: { description: 'Usage', schema: usageSchema } },
  })
  get(@TenantPrincipal() p: TenantPrincipalT) {
    return this.plans.ownUsage(p.tenantId);
  }
}
