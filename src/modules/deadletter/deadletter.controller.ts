import { Controller, Get, HttpCode, Post } from '@nestjs/common';
import type { z } from 'zod';
import { Body, Params, Query, TenantPrincipal, type TenantPrincipalT } from '../../core/http/request-context';
import { Route } from '../../core/http/route-spec';
import {
  deadLetterDetailSchema,
  deadLetterListQuery,
  deadLetterListSchema,
  deadLetterParams,
  deadLetterSchema,
  requeueBody,
  requeuedSchema,
  type DeadLetterListQuery,
} from './deadletter.dto';
import { DeadLetterService } from './deadletter.service';

@Controller('api/v1/deadletter')
export class DeadLetterController {
  constructor(private readonly deadLetter: DeadLetterService) {}

  @Get()
  @Route({
    operationId: 'listDeadLetter',
    summary: 'List the dead-letter: failed runs of DAGs with onFailure: deadletter (newest first)',
    tags: ['deadletter'],
    access: 'orchestrator:read',
    query: deadLetterListQuery,
    responses: { 200: { description: 'One page of entries', schema: deadLetterListSchema } },
  })
  list(@TenantPrincipal() p: TenantPrincipalT, @Query() q: DeadLetterListQuery) {
    return this.deadLetter.list(p.tenantId, q);
  }

  @Get(':runId')
  @Route({
    operationId: 'getDeadLetter',
    summary: 'Inspect a dead-letter entry: its run’s failed steps, their errors (class, code, message) and attempts',
    tags: ['deadletter'],
    access: 'orchestrator:read',
    params: deadLetterParams,
    responses: { 200: { description: 'The entry', schema: deadLetterDetailSchema } },
  })
  get(@TenantPrincipal() p: TenantPrincipalT, @Params() params: z.infer<typeof deadLetterParams>) {
    return this.deadLetter.get(p.tenantId, params.runId);
  }

  @Post(':runId/requeue')
  @HttpCode(201)
  @Route({
    operationId: 'requeueDeadLetter',
    summary: 'Rerun a dead-letter entry’s run from its failed step (recorded on the run); the entry is requeued',
    tags: ['deadletter'],
    access: 'orchestrator:write',
    params: deadLetterParams,
    body: requeueBody,
    responses: { 201: { description: 'The requeued entry and its rerun', schema: requeuedSchema } },
  })
  requeue(
    @TenantPrincipal() p: TenantPrincipalT,
    @Params() params: z.infer<typeof deadLetterParams>,
    @Body() body: z.infer<typeof requeueBody>,
  ) {
    return this.deadLetter.requeue(p.tenantId, params.runId, p.subject, body.fromStep);
  }

  @Post(':runId/discard')
  @HttpCode(200)
  @Route({
    operationId: 'discardDeadLetter',
    summary: 'Take an entry out of the dead-letter without rerunning it (recorded on the run)',
    tags: ['deadletter'],
    access: 'orchestrator:write',
    params: deadLetterParams,
    responses: { 200: { description: 'The discarded entry', schema: deadLetterSchema } },
  })
  discard(@TenantPrincipal() p: TenantPrincipalT, @Params() params: z.infer<typeof deadLetterParams>) {
    return this.deadLetter.discard(p.tenantId, params.runId, p.subject);
  }
}
