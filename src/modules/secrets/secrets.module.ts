import { Module } from '@nestjs/common';
import { SecretsController } from './secrets.controller';
import { SecretsRepository } from './secrets.repository';
import { SecretsService } from './secrets.service';

/**
 * Tenant secrets. The api role serves the routes; the worker role imports this module for
 * SecretsService.resolve (the controller is inert without the HTTP adapter).
 */
@Module({
  controllers: [SecretsController],
  providers: [SecretsRepository, SecretsService],
  exports: [SecretsService],
})
export class SecretsModule {}
