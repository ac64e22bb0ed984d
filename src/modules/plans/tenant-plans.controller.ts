import { Controller, Get, HttpCode, Post, Put } from '@nestjs/common';
import type { z } from 'zod';
import { Body, Params, PlatformPrincipal, type PlatformPrincipalT } from '../../core/http/request-context';
import { Route } from '../../core/http/route-spec';
import { tenantParams } from '../tenants/tenants.dto';
import {
  assignPlanBody,
  resetUsageBody,
  setOverridesBody,
  tenantPlanSchema,
  usageSchema,
  type AssignPlanBody,
  type ResetUsageBody,
  type SetOverridesBody,
} from './plans.dto';
import { PlansService } from './plans.service';

type TenantParams = z.infer<typeof tenantParams>;

/** A tenant's plan, limit overrides and usage, for platform operators. */
@Controller('api/v1/tenants')
export class TenantPlansController {
  constructor(private readonly plans: PlansService) {}

  @Put(':tenantId/plan')
  @Route({
    operationId: 'assignTenantPlan',
    summary: "Put a tenant on a plan, optionally with the time zone of its monthly quota's calendar",
    tags: ['platform'],
    access: 'platform:admin',
    params: tenantParams,
    body: assignPlanBody,
    responses: { 200: { description: "The tenant's plan", schema: tenantPlanSchema } },
  })
  assign(@PlatformPrincipal() op: PlatformPrincipalT, @Params() p: TenantParams, @Body() body: AssignPlanBody) {
    return this.plans.assign(op, p.tenantId, body);
  }

  @Put(':tenantId/limits')
  @Route({
    operationId: 'setTenantLimitOverrides',
    summary: "Replace a tenant's overrides of its plan's limits (a reason is required and audited)",
    tags: ['platform'],
    access: 'platform:admin',
    params: tenantParams,
    body: setOverridesBody,
    responses: { 200: { description: "The tenant's plan", schema: tenantPlanSchema } },
  })
  setLimits(@PlatformPrincipal() op: PlatformPrincipalT, @Params() p: TenantParams, @Body() body: SetOverridesBody) {
    return this.plans.setOverrides(op, p.tenantId, body);
  }

  @Get(':tenantId/usage')
  @Route({
    operationId: 'getTenantUsage',
    summary: "A tenant's limits, current use and quota period (the body of its own GET /api/v1/usage)",
    tags: ['platform'],
    access: 'platform:admin',
    params: tenantParams,
    responses: { 200: { description: 'Usage', schema: usageSchema } },
  })
  usage(@Params() p: TenantParams) {
    return this.plans.tenantUsage(p.tenantId);
  }

  @Post(':tenantId/usage/reset')
  @HttpCode(200)
  @Route({
    operationId: 'resetTenantUsage',
    summary: "Reset the run count of a tenant's current quota period (a reason is required and audited)",
    tags: ['platform'],
    access: 'platform:admin',
    params: tenantParams,
    body: resetUsageBody,
    responses: { 200: { description: 'Usage after the reset', schema: usageSchema } },
  })
  reset(@PlatformPrincipal() op: PlatformPrincipalT, @Params() p: TenantParams, @Body() body: ResetUsageBody) {
    return this.plans.resetUsage(op, p.tenantId, body);
  }
}
