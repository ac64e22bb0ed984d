import { Controller, Get, Res, UseGuards } from '@nestjs/common';
import type { FastifyReply } from 'fastify';
import { Route } from '../../core/http/route-spec';
import { AuthGuard } from '../auth/auth.guard';
import { ObservabilityService } from './observability.service';

/**
 * Prometheus metrics on the main listener. Metrics span tenants (labels name them), so they need
 * the platform operator scope: scrape with `Authorization: Bearer <platform:admin token>`.
 */
@Controller()
@UseGuards(AuthGuard)
export class MetricsController {
  constructor(private readonly service: ObservabilityService) {}

  @Get('metrics')
  @Route({
    operationId: 'metrics',
    summary: 'Prometheus metrics of this process (runs, steps, queue depth per tenant, process)',
    tags: ['system'],
    access: 'platform:admin',
    responses: {
      200: { description: 'Prometheus text exposition format 0.0.4', contentType: 'text/plain; version=0.0.4' },
    },
  })
  async metrics(@Res({ passthrough: true }) reply: FastifyReply): Promise<string> {
    const { contentType, body } = await this.service.scrape();
    void reply.type(contentType).header('cache-control', 'no-store');
    return body;
  }
}
