import { Controller, Get, HttpCode, Post } from '@nestjs/common';
import { z } from 'zod';
import { Body, Params, Query, TenantPrincipal, type TenantPrincipalT } from '../../core/http/request-context';
import { Route } from '../../core/http/route-spec';
import {
  createTokenBody,
  jtiParams,
  mintedTokenSchema,
  pageQuery,
  tokenListSchema,
  type CreateTokenBody,
} from './tokens.dto';
import { TokensService } from './tokens.service';

@Controller('api/v1/tokens')
export class TokensController {
  constructor(private readonly tokens: TokensService) {}

  @Post()
  @Route({
    operationId: 'createToken',
    summary: 'Mint a token for this tenant (never with more scopes than the caller holds)',
    tags: ['tokens'],
    access: 'orchestrator:admin',
    body: createTokenBody,
    responses: { 201: { description: 'Minted; the token is shown once', schema: mintedTokenSchema } },
    // The response holds the token, which is never stored, so it cannot be replayed.
    idempotent: false,
  })
  create(@TenantPrincipal() p: TenantPrincipalT, @Body() body: CreateTokenBody) {
    return this.tokens.create(p, body);
  }

  @Get()
  @Route({
    operationId: 'listTokens',
    summary: "List this tenant's tokens, newest first",
    tags: ['tokens'],
    access: 'orchestrator:admin',
    query: pageQuery,
    responses: { 200: { description: 'A page of tokens', schema: tokenListSchema } },
  })
  list(@TenantPrincipal() p: TenantPrincipalT, @Query() q: z.infer<typeof pageQuery>) {
    return this.tokens.list(p, q);
  }

  @Post(':jti/revoke')
  @HttpCode(200)
  @Route({
    operationId: 'revokeToken',
    summary: 'Revoke a token at once, on every replica (idempotent)',
    tags: ['tokens'],
    access: 'orchestrator:admin',
    params: jtiParams,
    responses: { 200: { description: 'Revoked', schema: z.object({ jti: z.uuid(), revokedAt: z.iso.datetime() }) } },
  })
  revoke(@TenantPrincipal() p: TenantPrincipalT, @Params() params: z.infer<typeof jtiParams>) {
    return this.tokens.revoke(p, params.jti);
  }
}
