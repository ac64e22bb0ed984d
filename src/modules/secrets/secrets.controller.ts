import { Controller, Delete, Get, HttpCode, Put } from '@nestjs/common';
import { Body, Params, TenantPrincipal, type TenantPrincipalT } from '../../core/http/request-context';
import { Route } from '../../core/http/route-spec';
import {
  putSecretBody,
  putSecretResponse,
  secretListSchema,
  secretParams,
  type PutSecretBody,
  type SecretParams,
} from './secrets.dto';
import { SecretsService } from './secrets.service';

@Controller('api/v1/secrets')
export class SecretsController {
  constructor(private readonly secrets: SecretsService) {}

  @Put(':name')
  @HttpCode(200)
  @Route({
    operationId: 'putSecret',
    summary: 'Create or replace a tenant secret (the value is stored encrypted and never returned)',
    tags: ['secrets'],
    access: 'orchestrator:admin',
    params: secretParams,
    body: putSecretBody,
    responses: {
      200: { description: 'Stored', schema: putSecretResponse },
      413: { description: 'The value is larger than 64 KiB' },
    },
  })
  put(@TenantPrincipal() p: TenantPrincipalT, @Params() params: SecretParams, @Body() body: PutSecretBody) {
    return this.secrets.put(p, params.name, body.value);
  }

  @Get()
  @Route({
    operationId: 'listSecrets',
    summary: "List this tenant's secrets: names and timestamps, never values",
    tags: ['secrets'],
    access: 'orchestrator:admin',
    responses: { 200: { description: 'The secrets, by name', schema: secretListSchema } },
  })
  list(@TenantPrincipal() p: TenantPrincipalT) {
    return this.secrets.list(p);
  }

  @Delete(':name')
  @HttpCode(204)
  @Route({
    operationId: 'deleteSecret',
    summary: 'Delete a tenant secret (steps that reference it then fail with SECRET_NOT_FOUND)',
    tags: ['secrets'],
    access: 'orchestrator:admin',
    params: secretParams,
    responses: { 204: { description: 'Deleted' } },
  })
  async delete(@TenantPrincipal() p: TenantPrincipalT, @Params() params: SecretParams): Promise<void> {
    await this.secrets.delete(p, params.name);
  }
}
