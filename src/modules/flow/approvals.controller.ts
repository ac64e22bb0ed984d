import { Controller, HttpCode, Post } from '@nestjs/common';
import type { z } from 'zod';
import { Body, Params, TenantPrincipal, type TenantPrincipalT } from '../../core/http/request-context';
import { Route } from '../../core/http/route-spec';
import { ApprovalsService } from '../engine/approvals.service';
import { stepParams } from '../runs/runs.dto';
import { decisionBody, decisionSchema, type DecisionBody } from './approvals.dto';

@Controller('api/v1/runs')
export class ApprovalsController {
  constructor(private readonly approvals: ApprovalsService) {}

  @Post(':runId/steps/:stepId/decision')
  @HttpCode(200)
  @Route({
    operationId: 'decideStep',
    summary: 'Decide a waiting approval step (approved or rejected); the run moves on at once',
    tags: ['runs'],
    access: 'orchestrator:write',
    params: stepParams,
    body: decisionBody,
    responses: { 200: { description: 'The decision, applied', schema: decisionSchema } },
  })
  decide(
    @TenantPrincipal() p: TenantPrincipalT,
    @Params() params: z.infer<typeof stepParams>,
    @Body() body: DecisionBody,
  ) {
    return this.approvals.decide(
      p.tenantId,
      params.runId,
      params.stepId,
      p.subject,
      body.decision,
      body.comment ?? null,
    );
  }
}
