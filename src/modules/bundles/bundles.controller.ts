import { Controller, Get, Post, Res } from '@nestjs/common';
import type { FastifyReply } from 'fastify';
import type { z } from 'zod';
import { Body, Params, Query, TenantPrincipal, type TenantPrincipalT } from '../../core/http/request-context';
import { Route } from '../../core/http/route-spec';
import {
  bundleListQuery,
  bundleListSchema,
  bundleParams,
  bundleSchema,
  importBundleBody,
  importedBundleSchema,
  type ImportBundleBody,
} from './bundles.dto';
import { BundlesService } from './bundles.service';

@Controller('api/v1/bundles')
export class BundlesController {
  constructor(private readonly bundles: BundlesService) {}

  @Post()
  @Route({
    operationId: 'importBundle',
    summary: 'Import a signed bundle: all of its DAGs and files, or nothing; a repeat import changes nothing',
    tags: ['bundles'],
    access: 'orchestrator:admin',
    body: importBundleBody,
    responses: {
      201: { description: 'Imported', schema: importedBundleSchema },
      200: { description: 'This bundle was already imported: the existing record', schema: importedBundleSchema },
    },
  })
  async import(
    @TenantPrincipal() p: TenantPrincipalT,
    @Body() body: ImportBundleBody,
    @Res({ passthrough: true }) reply: FastifyReply,
  ) {
    const r = await this.bundles.import(p.tenantId, p.subject, Buffer.from(body.bundle, 'base64'), body.signature);
    void reply.status(r.imported ? 201 : 200);
    return r;
  }

  @Get()
  @Route({
    operationId: 'listBundles',
    summary: 'List imported bundles, newest first',
    tags: ['bundles'],
    access: 'orchestrator:read',
    query: bundleListQuery,
    responses: { 200: { description: 'A page of bundles', schema: bundleListSchema } },
  })
  list(@TenantPrincipal() p: TenantPrincipalT, @Query() q: z.infer<typeof bundleListQuery>) {
    return this.bundles.list(p.tenantId, q);
  }

  @Get(':bundleHash')
  @Route({
    operationId: 'getBundle',
    summary: 'One imported bundle with its DAG versions and files',
    tags: ['bundles'],
    access: 'orchestrator:read',
    params: bundleParams,
    responses: { 200: { description: 'The bundle', schema: bundleSchema } },
  })
  get(@TenantPrincipal() p: TenantPrincipalT, @Params() params: z.infer<typeof bundleParams>) {
    return this.bundles.get(p.tenantId, params.bundleHash);
  }
}
