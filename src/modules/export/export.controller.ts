import { Controller, Get, Res } from '@nestjs/common';
import type { FastifyReply } from 'fastify';
import { Readable } from 'node:stream';
import { Query, TenantPrincipal, type TenantPrincipalT } from '../../core/http/request-context';
import { Route } from '../../core/http/route-spec';
import { exportQuery, type ExportQuery } from './export.dto';
import { ExportService, manifestLine, parseRange } from './export.service';

@Controller('api/v1/export')
export class ExportController {
  constructor(private readonly service: ExportService) {}

  @Get()
  @Route({
    operationId: 'exportRuns',
    summary:
      'NDJSON audit export of the tenant runs started in [from, to): runs, events, steps, attempts, logs, metrics, spans; the last line is the signed manifest',
    tags: ['export'],
    access: 'orchestrator:admin',
    query: exportQuery,
    responses: {
      200: {
        description:
          'NDJSON, one record per line; the last line is {"type":"manifest","manifest","jws","kid","publicJwk"}',
        contentType: 'application/x-ndjson',
      },
    },
  })
  async export(@Query() q: ExportQuery, @TenantPrincipal() p: TenantPrincipalT, @Res() reply: FastifyReply) {
    const range = parseRange(q);
    const service = this.service;
    await service.checkSize(p.tenantId, range);
    async function* body(): AsyncGenerator<string> {
      const lines = service.lines(p.tenantId, range);
      let r = await lines.next();
      while (!r.done) {
        yield r.value;
        r = await lines.next();
      }
      yield manifestLine(r.value);
    }
    void reply
      .type('application/x-ndjson; charset=utf-8')
      .header('cache-control', 'no-store')
      .send(Readable.from(body()));
  }
}
