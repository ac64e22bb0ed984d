import { Controller, Get, HttpCode, Post, Put } from '@nestjs/common';
import type { z } from 'zod';
import { Body, Params, Query, TenantPrincipal, type TenantPrincipalT } from '../../core/http/request-context';
import { Route } from '../../core/http/route-spec';
import {
  addTrustKeyBody,
  tenantPolicySchema,
  trustKeyListQuery,
  trustKeyListSchema,
  trustKeyParams,
  trustKeySchema,
  updatePolicyBody,
  type AddTrustKeyBody,
} from './trust.dto';
import { TrustService } from './trust.service';

@Controller('api/v1/trust/keys')
export class TrustKeysController {
  constructor(private readonly trust: TrustService) {}

  @Post()
  @Route({
    operationId: 'addTrustKey',
    summary: 'Trust an Ed25519 public key to sign bundles and DAG versions for its owner',
    tags: ['trust'],
    access: 'orchestrator:admin',
    body: addTrustKeyBody,
    responses: { 201: { description: 'Trusted', schema: trustKeySchema } },
  })
  add(@TenantPrincipal() p: TenantPrincipalT, @Body() body: AddTrustKeyBody) {
    return this.trust.addKey(p, body);
  }

  @Get()
  @Route({
    operationId: 'listTrustKeys',
    summary: "List this tenant's trusted keys, newest first (revoked ones included)",
    tags: ['trust'],
    access: 'orchestrator:read',
    query: trustKeyListQuery,
    responses: { 200: { description: 'A page of keys', schema: trustKeyListSchema } },
  })
  list(@TenantPrincipal() p: TenantPrincipalT, @Query() q: z.infer<typeof trustKeyListQuery>) {
    return this.trust.listKeys(p.tenantId, q);
  }

  @Get(':kid')
  @Route({
    operationId: 'getTrustKey',
    summary: 'Get one trusted key',
    tags: ['trust'],
    access: 'orchestrator:read',
    params: trustKeyParams,
    responses: { 200: { description: 'The key', schema: trustKeySchema } },
  })
  get(@TenantPrincipal() p: TenantPrincipalT, @Params() params: z.infer<typeof trustKeyParams>) {
    return this.trust.getKey(p.tenantId, params.kid);
  }

  @Post(':kid/revoke')
  @HttpCode(200)
  @Route({
    operationId: 'revokeTrustKey',
    summary: 'Revoke a trusted key: signatures by it stop verifying at once (idempotent)',
    tags: ['trust'],
    access: 'orchestrator:admin',
    params: trustKeyParams,
    responses: { 200: { description: 'Revoked', schema: trustKeySchema } },
  })
  revoke(@TenantPrincipal() p: TenantPrincipalT, @Params() params: z.infer<typeof trustKeyParams>) {
    return this.trust.revokeKey(p, params.kid);
  }
}

@Controller('api/v1/policy')
export class PolicyController {
  constructor(private readonly trust: TrustService) {}

  @Get()
  @Route({
    operationId: 'getTenantPolicy',
    summary: "This tenant's policy",
    tags: ['trust'],
    access: 'orchestrator:read',
    responses: { 200: { description: 'The policy', schema: tenantPolicySchema } },
  })
  get(@TenantPrincipal() p: TenantPrincipalT) {
    return this.trust.getPolicy(p.tenantId);
  }

  @Put()
  @Route({
    operationId: 'updateTenantPolicy',
    summary: "Set this tenant's policy (requireSignedDags)",
    tags: ['trust'],
    access: 'orchestrator:admin',
    body: updatePolicyBody,
    responses: { 200: { description: 'The policy now in force', schema: tenantPolicySchema } },
  })
  put(@TenantPrincipal() p: TenantPrincipalT, @Body() body: z.infer<typeof updatePolicyBody>) {
    return this.trust.setPolicy(p.tenantId, body);
  }
}
