import { Module } from '@nestjs/common';
import { APP_GUARD } from '@nestjs/core';
import { ValidationGuard } from '../../core/http/validation.guard';
import { AuthGuard } from './auth.guard';
import { AuthRepository } from './auth.repository';
import { TokenService } from './token.service';
import { TokenStatusCache } from './token-status-cache';
import { TokensController } from './tokens.controller';
import { TokensService } from './tokens.service';

@Module({
  controllers: [TokensController],
  providers: [
    AuthRepository,
    TokenService,
    TokensService,
    TokenStatusCache,
    AuthGuard,
    // Order matters: authenticate (401/403) before validating input (400).
    { provide: APP_GUARD, useExisting: AuthGuard },
    { provide: APP_GUARD, useClass: ValidationGuard },
  ],
  exports: [AuthRepository, TokenService, TokensService, AuthGuard],
})
export class AuthModule {}
