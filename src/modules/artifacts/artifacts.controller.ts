import { Controller, Get, Res } from '@nestjs/common';
import type { FastifyReply } from 'fastify';
import { z } from 'zod';
import { Params, TenantPrincipal, type TenantPrincipalT } from '../../core/http/request-context';
import { Route } from '../../core/http/route-spec';
import { ArtifactsService } from './artifacts.service';

const artifactParams = z.strictObject({ sha256: z.string().regex(/^[0-9a-f]{64}$/, 'a lowercase hex SHA-256') });

@Controller('api/v1/artifacts')
export class ArtifactsController {
  constructor(private readonly artifacts: ArtifactsService) {}

  @Get(':sha256')
  @Route({
    operationId: 'getArtifact',
    summary: 'A content-addressed artifact (step outputs or logs) of this tenant',
    tags: ['runs'],
    access: 'orchestrator:read',
    params: artifactParams,
    responses: { 200: { description: 'The artifact body', contentType: 'application/json' } },
  })
  async get(
    @TenantPrincipal() p: TenantPrincipalT,
    @Params() params: z.infer<typeof artifactParams>,
    @Res({ passthrough: true }) reply: FastifyReply,
  ) {
    const a = await this.artifacts.get(p.tenantId, params.sha256);
    void reply.header('content-type', a.mediaType).header('etag', `"${params.sha256}"`);
    return a.body;
  }
}
