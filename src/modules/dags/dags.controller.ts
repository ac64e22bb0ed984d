import { Controller, Get, Headers, HttpCode, Post, Res } from '@nestjs/common';
import type { FastifyReply } from 'fastify';
import { Body, Params, Query, TenantPrincipal, type TenantPrincipalT } from '../../core/http/request-context';
import { Route } from '../../core/http/route-spec';
import {
  dagGraphSchema,
  dagListQuery,
  dagListSchema,
  dagParams,
  dagVersionParams,
  dagVersionSchema,
  graphQuery,
  publishDagBody,
  publishedDagSchema,
  type DagListQuery,
  type DagParams,
  type DagVersionParams,
  type GraphQuery,
} from './dags.dto';
import { DagsService } from './dags.service';

@Controller('api/v1/dags')
export class DagsController {
  constructor(private readonly dags: DagsService) {}

  @Post()
  @Route({
    operationId: 'publishDag',
    summary:
      'Publish a DAG version (JSON, or YAML with Content-Type application/yaml); identical content returns the existing version',
    tags: ['dags'],
    access: 'orchestrator:admin',
    body: publishDagBody,
    bodyContentTypes: ['application/yaml'],
    responses: {
      201: { description: 'A new version', schema: publishedDagSchema },
      200: { description: 'Identical content was already published: that version', schema: publishedDagSchema },
    },
  })
  async publish(
    @TenantPrincipal() p: TenantPrincipalT,
    @Body() body: unknown,
    @Headers('content-type') contentType: string | undefined,
    @Res({ passthrough: true }) reply: FastifyReply,
    @Headers('x-ordo-dag-signature') signature: string | undefined,
  ) {
    const r = await this.dags.publishBody(p.tenantId, p.subject, body, contentType, signature);
    void reply.status(r.created ? 201 : 200);
    return r;
  }

  @Get()
  @Route({
    operationId: 'listDags',
    summary: 'List DAG versions: dagId ascending, version descending',
    tags: ['dags'],
    access: 'orchestrator:read',
    query: dagListQuery,
    responses: { 200: { description: 'A page of versions', schema: dagListSchema } },
  })
  list(@TenantPrincipal() p: TenantPrincipalT, @Query() q: DagListQuery) {
    return this.dags.list(p.tenantId, q);
  }

  @Get(':dagId')
  @Route({
    operationId: 'getDag',
    summary: 'The latest active version of a DAG',
    tags: ['dags'],
    access: 'orchestrator:read',
    params: dagParams,
    responses: { 200: { description: 'The version', schema: dagVersionSchema } },
  })
  latest(@TenantPrincipal() p: TenantPrincipalT, @Params() params: DagParams) {
    return this.dags.get(p.tenantId, params.dagId);
  }

  @Get(':dagId/versions/:version')
  @Route({
    operationId: 'getDagVersion',
    summary: 'One DAG version: definition, content hash, owner, signature and status history',
    tags: ['dags'],
    access: 'orchestrator:read',
    params: dagVersionParams,
    responses: { 200: { description: 'The version', schema: dagVersionSchema } },
  })
  version(@TenantPrincipal() p: TenantPrincipalT, @Params() params: DagVersionParams) {
    return this.dags.get(p.tenantId, params.dagId, params.version);
  }

  @Post(':dagId/versions/:version/disable')
  @HttpCode(200)
  @Route({
    operationId: 'disableDagVersion',
    summary: 'Disable a version: new runs cannot use it (idempotent)',
    tags: ['dags'],
    access: 'orchestrator:admin',
    params: dagVersionParams,
    responses: { 200: { description: 'The version, disabled', schema: dagVersionSchema } },
  })
  disable(@TenantPrincipal() p: TenantPrincipalT, @Params() params: DagVersionParams) {
    return this.dags.setStatus(p.tenantId, p.subject, params.dagId, params.version, 'disabled');
  }

  @Post(':dagId/versions/:version/enable')
  @HttpCode(200)
  @Route({
    operationId: 'enableDagVersion',
    summary: 'Re-enable a disabled version (idempotent)',
    tags: ['dags'],
    access: 'orchestrator:admin',
    params: dagVersionParams,
    responses: { 200: { description: 'The version, active', schema: dagVersionSchema } },
  })
  enable(@TenantPrincipal() p: TenantPrincipalT, @Params() params: DagVersionParams) {
    return this.dags.setStatus(p.tenantId, p.subject, params.dagId, params.version, 'active');
  }

  @Get(':dagId/versions/:version/graph')
  @Route({
    operationId: 'getDagGraph',
    summary: 'The step graph: JSON {nodes, edges, order}, or Graphviz DOT (text/vnd.graphviz) with format=dot',
    tags: ['dags'],
    access: 'orchestrator:read',
    params: dagVersionParams,
    query: graphQuery,
    responses: { 200: { description: 'The graph (JSON; DOT text with format=dot)', schema: dagGraphSchema } },
  })
  async graph(
    @TenantPrincipal() p: TenantPrincipalT,
    @Params() params: DagVersionParams,
    @Query() q: GraphQuery,
    @Res({ passthrough: true }) reply: FastifyReply,
  ) {
    const g = await this.dags.graph(p.tenantId, params.dagId, params.version, q.format);
    if (typeof g === 'string') void reply.type('text/vnd.graphviz; charset=utf-8');
    return g;
  }
}
