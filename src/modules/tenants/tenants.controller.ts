import { Controller, Get, HttpCode, Post } from '@nestjs/common';
import type { z } from 'zod';
import { Body, Params, PlatformPrincipal, Query, type PlatformPrincipalT } from '../../core/http/request-context';
import { Route } from '../../core/http/route-spec';
import { mintedTokenSchema, operatorTokenBody, type OperatorTokenBody } from '../auth/tokens.dto';
import {
  createTenantBody,
  tenantListQuery,
  tenantListSchema,
  tenantParams,
  tenantSchema,
  type CreateTenantBody,
} from './tenants.dto';
import { TenantsService } from './tenants.service';

@Controller('api/v1/tenants')
export class TenantsController {
  constructor(private readonly tenants: TenantsService) {}

  @Post()
  @Route({
    operationId: 'createTenant',
    summary: 'Create a tenant',
    tags: ['platform'],
    access: 'platform:admin',
    body: createTenantBody,
    responses: { 201: { description: 'Created', schema: tenantSchema } },
  })
  create(@Body() body: CreateTenantBody) {
    return this.tenants.create(body);
  }

  @Get()
  @Route({
    operationId: 'listTenants',
    summary: 'List tenants by id',
    tags: ['platform'],
    access: 'platform:admin',
    query: tenantListQuery,
    responses: { 200: { description: 'A page of tenants', schema: tenantListSchema } },
  })
  list(@Query() q: z.infer<typeof tenantListQuery>) {
    return this.tenants.list(q);
  }

  @Post(':tenantId/disable')
  @HttpCode(200)
  @Route({
    operationId: 'disableTenant',
    summary: 'Disable a tenant: its tokens get 403 until it is enabled again',
    tags: ['platform'],
    access: 'platform:admin',
    params: tenantParams,
    responses: { 200: { description: 'Disabled', schema: tenantSchema } },
  })
  disable(@Params() p: z.infer<typeof tenantParams>) {
    return this.tenants.setStatus(p.tenantId, 'disabled');
  }

  @Post(':tenantId/enable')
  @HttpCode(200)
  @Route({
    operationId: 'enableTenant',
    summary: 'Enable a disabled tenant',
    tags: ['platform'],
    access: 'platform:admin',
    params: tenantParams,
    responses: { 200: { description: 'Enabled', schema: tenantSchema } },
  })
  enable(@Params() p: z.infer<typeof tenantParams>) {
    return this.tenants.setStatus(p.tenantId, 'active');
  }

  @Post(':tenantId/tokens')
  @Route({
    operationId: 'createTenantToken',
    summary: 'Mint a token for a tenant (operator)',
    tags: ['platform'],
    access: 'platform:admin',
    params: tenantParams,
    body: operatorTokenBody,
    responses: { 201: { description: 'Minted; the token is shown once', schema: mintedTokenSchema } },
  })
  mint(
    @PlatformPrincipal() op: PlatformPrincipalT,
    @Params() p: z.infer<typeof tenantParams>,
    @Body() body: OperatorTokenBody,
  ) {
    return this.tenants.mintToken(op.subject, p.tenantId, body);
  }
}
