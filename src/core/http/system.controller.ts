import { Controller, Get, Header, Res } from '@nestjs/common';
import type { FastifyReply } from 'fastify';
import { z } from 'zod';
import { Database } from '../database/database';
import { checkReadiness } from '../database/readiness';
import { buildOpenApi, RouteTable } from './openapi';
import { Route } from './route-spec';

const health = z.object({ status: z.enum(['ok', 'unavailable']), checks: z.record(z.string(), z.string()).optional() });

/** Process health, readiness and the OpenAPI document: public, served by every role. */
@Controller()
export class SystemController {
  private doc?: Record<string, unknown>;

  constructor(
    private readonly db: Database,
    private readonly routes: RouteTable,
  ) {}

  @Get('healthz')
  @Route({
    operationId: 'healthz',
    summary: 'The process is up',
    tags: ['system'],
    access: 'public',
    responses: { 200: { description: 'Up', schema: health } },
  })
  healthz() {
    return { status: 'ok' };
  }

  @Get('readyz')
  @Route({
    operationId: 'readyz',
    summary: 'The database is reachable and the schema is current',
    tags: ['system'],
    access: 'public',
    responses: { 200: { description: 'Ready', schema: health }, 503: { description: 'Not ready', schema: health } },
  })
  async readyz(@Res({ passthrough: true }) reply: FastifyReply) {
    const { ready, checks } = await checkReadiness(this.db);
    void reply.status(ready ? 200 : 503);
    return { status: ready ? 'ok' : 'unavailable', checks };
  }

  @Get('api/v1/openapi.json')
  @Header('cache-control', 'no-cache')
  @Route({
    operationId: 'openapi',
    summary: 'This document',
    tags: ['system'],
    access: 'public',
    responses: { 200: { description: 'OpenAPI 3.1 document', schema: z.record(z.string(), z.unknown()) } },
  })
  openapi() {
    this.doc ??= buildOpenApi(this.routes.routes(), { title: 'Ordo API', version: '1' });
    return this.doc;
  }
}
