import { Controller, Delete, Get, HttpCode, Post, Put } from '@nestjs/common';
import type { z } from 'zod';
import { Body, Params, PlatformPrincipal, type PlatformPrincipalT } from '../../core/http/request-context';
import { Route } from '../../core/http/route-spec';
import {
  createPlanBody,
  planListSchema,
  planParams,
  planSchema,
  updatePlanBody,
  type CreatePlanBody,
  type UpdatePlanBody,
} from './plans.dto';
import { PlansService } from './plans.service';

type PlanParams = z.infer<typeof planParams>;

@Controller('api/v1/plans')
export class PlansController {
  constructor(private readonly plans: PlansService) {}

  @Post()
  @Route({
    operationId: 'createPlan',
    summary: 'Create a plan: a named set of limits',
    tags: ['platform'],
    access: 'platform:admin',
    body: createPlanBody,
    responses: { 201: { description: 'Created', schema: planSchema } },
  })
  create(@PlatformPrincipal() op: PlatformPrincipalT, @Body() body: CreatePlanBody) {
    return this.plans.create(op, body);
  }

  @Get()
  @Route({
    operationId: 'listPlans',
    summary: 'List plans by id',
    tags: ['platform'],
    access: 'platform:admin',
    responses: { 200: { description: 'Every plan', schema: planListSchema } },
  })
  list() {
    return this.plans.list();
  }

  @Get(':planId')
  @Route({
    operationId: 'getPlan',
    summary: 'A plan',
    tags: ['platform'],
    access: 'platform:admin',
    params: planParams,
    responses: { 200: { description: 'The plan', schema: planSchema } },
  })
  get(@Params() p: PlanParams) {
    return this.plans.get(p.planId);
  }

  @Put(':planId')
  @Route({
    operationId: 'updatePlan',
    summary: "Replace a plan's limits (and description); every tenant on the plan gets them at once",
    tags: ['platform'],
    access: 'platform:admin',
    params: planParams,
    body: updatePlanBody,
    responses: { 200: { description: 'Updated', schema: planSchema } },
  })
  update(@PlatformPrincipal() op: PlatformPrincipalT, @Params() p: PlanParams, @Body() body: UpdatePlanBody) {
    return this.plans.update(op, p.planId, body);
  }

  @Delete(':planId')
  @HttpCode(204)
  @Route({
    operationId: 'deletePlan',
    summary: 'Delete a plan no tenant is on (409 PLAN_IN_USE otherwise)',
    tags: ['platform'],
    access: 'platform:admin',
    params: planParams,
    responses: { 204: { description: 'Deleted' } },
  })
  async delete(@PlatformPrincipal() op: PlatformPrincipalT, @Params() p: PlanParams): Promise<void> {
    await this.plans.remove(op, p.planId);
  }
}
