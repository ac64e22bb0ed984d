import { Controller, Get, Res } from '@nestjs/common';
import type { FastifyReply } from 'fastify';
import { Readable } from 'node:stream';
import { canonicalJson } from '../../core/json/canonical-json';
import { Query } from '../../core/http/request-context';
import { Route } from '../../core/http/route-spec';
import { AuditExportService } from '../export/audit-export.service';
import {
  auditExportQuery,
  auditPageSchema,
  auditQuery,
  queuesQuery,
  queuesSchema,
  type AuditExportQuery,
  type AuditQuery,
  type QueuesQuery,
} from './admin.dto';
import { AdminService } from './admin.service';

@Controller('api/v1/admin')
export class AdminController {
  constructor(
    private readonly service: AdminService,
    private readonly auditExport: AuditExportService,
  ) {}

  @Get('queues')
  @Route({
    operationId: 'adminQueues',
    summary:
      "Each tenant's queue: ready, waiting and in-flight steps, oldest ready age, claims per second, plan and limits hit in the last minute",
    tags: ['platform'],
    access: 'platform:admin',
    query: queuesQuery,
    responses: { 200: { description: 'A page of tenants by id', schema: queuesSchema } },
  })
  queues(@Query() q: QueuesQuery) {
    return this.service.queues(q);
  }

  @Get('audit')
  @Route({
    operationId: 'adminAudit',
    summary: 'The operator audit log, newest first',
    tags: ['platform'],
    access: 'platform:admin',
    query: auditQuery,
    responses: { 200: { description: 'A page of entries', schema: auditPageSchema } },
  })
  audit(@Query() q: AuditQuery) {
    return this.service.auditPage(q);
  }

  @Get('audit/export')
  @Route({
    operationId: 'adminAuditExport',
    summary: 'The operator audit log as NDJSON, one entry a line in seq order; the last line is the signed manifest',
    tags: ['platform'],
    access: 'platform:admin',
    query: auditExportQuery,
    responses: {
      200: {
        description:
          'NDJSON, one {"type":"audit",…} record per line; the last line is {"type":"manifest","manifest","jws","kid","publicJwk"}',
        contentType: 'application/x-ndjson',
      },
    },
  })
  async export(@Query() q: AuditExportQuery, @Res() reply: FastifyReply): Promise<void> {
    // Refusals (unknown tenant, bad range) answer before the stream starts.
    if (q.tenantId !== undefined) await this.service.requireTenant(q.tenantId);
    this.auditExport.check(q);
    const lines = this.auditExport.lines(q);
    async function* body(): AsyncGenerator<string> {
      let r = await lines.next();
      while (!r.done) {
        yield r.value;
        r = await lines.next();
      }
      yield `${canonicalJson({ type: 'manifest', ...r.value })}\n`;
    }
    void reply
      .type('application/x-ndjson; charset=utf-8')
      .header('cache-control', 'no-store')
      .send(Readable.from(body()));
  }
}
