import { Controller, Get, HttpCode, Post, Req, Res } from '@nestjs/common';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { z } from 'zod';
import { Body, Params, Query, TenantPrincipal, type TenantPrincipalT } from '../../core/http/request-context';
import { Route } from '../../core/http/route-spec';
import {
  attemptListSchema,
  createdRunSchema,
  createRunBody,
  eventListSchema,
  eventsQuery,
  rerunBody,
  runAttemptListSchema,
  runDetailSchema,
  runListQuery,
  runListSchema,
  runParams,
  runSchema,
  stepParams,
  type CreateRunBody,
  type RunListQuery,
} from './runs.dto';
import { runExplanationSchema } from './run-explain.dto';
import { RunExplainService } from './run-explain.service';
import { acceptsNdjson, NDJSON, runsNdjson } from './runs-ndjson';
import { RunsService } from './runs.service';

@Controller('api/v1/runs')
export class RunsController {
  constructor(
    private readonly runs: RunsService,
    private readonly explainer: RunExplainService,
  ) {}

  @Post()
  @Route({
    operationId: 'createRun',
    summary: 'Start a run of a DAG (idempotent on dagId, runToken and inputs)',
    tags: ['runs'],
    access: 'orchestrator:write',
    body: createRunBody,
    responses: {
      201: { description: 'Created', schema: createdRunSchema },
      200: { description: 'The run this runToken already started with the same inputs', schema: createdRunSchema },
    },
  })
  async create(
    @TenantPrincipal() p: TenantPrincipalT,
    @Body() body: CreateRunBody,
    @Res({ passthrough: true }) reply: FastifyReply,
  ) {
    const r = await this.runs.createRun(p.tenantId, { ...body, requestedBy: p.subject });
    reply.status(r.created ? 201 : 200);
    return r;
  }

  @Get()
  @Route({
    operationId: 'listRuns',
    summary: 'List runs, newest first (startedUtc desc, then runId)',
    tags: ['runs'],
    access: 'orchestrator:read',
    query: runListQuery,
    responses: {
      200: {
        description:
          'A page of runs. With `Accept: application/x-ndjson`: every run matching the filters, streamed one Run a ' +
          'line (starting after `pageToken` when given; `limit`, when given, caps the lines)',
        schema: runListSchema,
        sequences: { [NDJSON]: runSchema },
      },
    },
  })
  async list(
    @TenantPrincipal() p: TenantPrincipalT,
    @Query() q: RunListQuery,
    @Req() req: FastifyRequest,
    @Res({ passthrough: true }) reply: FastifyReply,
  ) {
    void reply.header('vary', 'Accept');
    if (!acceptsNdjson(req.headers.accept)) return this.runs.list(p.tenantId, q);
    const limited = (req.query as Record<string, unknown> | undefined)?.limit !== undefined;
    const body = await runsNdjson(this.runs, p.tenantId, q, limited ? q.limit : undefined);
    void reply.type(`${NDJSON}; charset=utf-8`).header('cache-control', 'no-store');
    return body;
  }

  @Get(':runId')
  @Route({
    operationId: 'getRun',
    summary: 'A run with its steps, dispatch order and hashes',
    tags: ['runs'],
    access: 'orchestrator:read',
    params: runParams,
    responses: { 200: { description: 'The run', schema: runDetailSchema } },
  })
  get(@TenantPrincipal() p: TenantPrincipalT, @Params() params: z.infer<typeof runParams>) {
    return this.runs.get(p.tenantId, params.runId);
  }

  @Get(':runId/explain')
  @Route({
    operationId: 'explainRun',
    summary: 'Why each unfinished step of a run is not running, with a stable reason code and its details',
    tags: ['runs'],
    access: 'orchestrator:read',
    params: runParams,
    responses: { 200: { description: "The run's unfinished steps and their reasons", schema: runExplanationSchema } },
  })
  explain(@TenantPrincipal() p: TenantPrincipalT, @Params() params: z.infer<typeof runParams>) {
    return this.explainer.explain(p.tenantId, params.runId);
  }

  @Get(':runId/steps/:stepId/attempts')
  @Route({
    operationId: 'listStepAttempts',
    summary: "A step's attempts with their phase timings",
    tags: ['runs'],
    access: 'orchestrator:read',
    params: stepParams,
    responses: { 200: { description: 'Attempts, oldest first', schema: attemptListSchema } },
  })
  attempts(@TenantPrincipal() p: TenantPrincipalT, @Params() params: z.infer<typeof stepParams>) {
    return this.runs.attempts(p.tenantId, params.runId, params.stepId);
  }

  @Get(':runId/attempts')
  @Route({
    operationId: 'listRunAttempts',
    summary: "Every attempt of a run's steps with their phase timings (a Gantt of the run)",
    tags: ['runs'],
    access: 'orchestrator:read',
    params: runParams,
    responses: { 200: { description: 'Attempts, by step then attempt', schema: runAttemptListSchema } },
  })
  runAttempts(@TenantPrincipal() p: TenantPrincipalT, @Params() params: z.infer<typeof runParams>) {
    return this.runs.runAttempts(p.tenantId, params.runId);
  }

  @Get(':runId/events')
  @Route({
    operationId: 'listRunEvents',
    summary: "A run's events after sequence number `after` (hash-chained)",
    tags: ['runs'],
    access: 'orchestrator:read',
    params: runParams,
    query: eventsQuery,
    responses: { 200: { description: 'A page of events', schema: eventListSchema } },
  })
  events(
    @TenantPrincipal() p: TenantPrincipalT,
    @Params() params: z.infer<typeof runParams>,
    @Query() q: z.infer<typeof eventsQuery>,
  ) {
    return this.runs.events(p.tenantId, params.runId, q.after, q.limit);
  }

  @Post(':runId/cancel')
  @HttpCode(200)
  @Route({
    operationId: 'cancelRun',
    summary: 'Cancel a run (idempotent); running steps are told to stop',
    tags: ['runs'],
    access: 'orchestrator:write',
    params: runParams,
    responses: { 200: { description: 'The cancelled run', schema: runSchema } },
  })
  cancel(@TenantPrincipal() p: TenantPrincipalT, @Params() params: z.infer<typeof runParams>) {
    return this.runs.cancel(p.tenantId, params.runId, p.subject);
  }

  @Post(':runId/replay')
  @Route({
    operationId: 'replayRun',
    summary: 'Start a new run with the same DAG version and inputs (replayOf links it)',
    tags: ['runs'],
    access: 'orchestrator:write',
    params: runParams,
    responses: { 201: { description: 'The new run', schema: createdRunSchema } },
  })
  replay(@TenantPrincipal() p: TenantPrincipalT, @Params() params: z.infer<typeof runParams>) {
    return this.runs.replay(p.tenantId, params.runId, p.subject);
  }

  @Post(':runId/rerun')
  @Route({
    operationId: 'rerunRun',
    summary: 'Rerun a failed run from a step, reusing the outputs of the steps that succeeded upstream',
    tags: ['runs'],
    access: 'orchestrator:write',
    params: runParams,
    body: rerunBody,
    responses: { 201: { description: 'The new run', schema: createdRunSchema } },
  })
  rerun(
    @TenantPrincipal() p: TenantPrincipalT,
    @Params() params: z.infer<typeof runParams>,
    @Body() body: z.infer<typeof rerunBody>,
  ) {
    return this.runs.rerun(p.tenantId, params.runId, body.fromStep, p.subject);
  }
}
