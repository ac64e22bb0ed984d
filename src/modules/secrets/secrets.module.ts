import { Module } from '@nestjs/common';
import { SecretsController } from './secrets.controller';
import { SecretsRepository } from './secrets.repository';
import { SecretsService } from './secrets.service';

/** Tenant secrets without the routes: the worker role resolves step secrets through SecretsService. */
@Module({
  providers: [SecretsRepository, SecretsService],
  exports: [SecretsService],
})
export class SecretsCoreModule {}

/** The secrets API (api role): the routes are served only where the api role's guards run. */
@Module({
  imports: [SecretsCoreModule],
  controllers: [SecretsController],
  exports: [SecretsCoreModule],
})
export class SecretsModule {}
