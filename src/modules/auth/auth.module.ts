import { Module } from '@nestjs/common';
import { APP_GUARD } from '@nestjs/core';
import { ValidationGuard } from '../../core/http/validation.guard';
import { AuthGuard } from './auth.guard';
import { AuthRepository } from './auth.repository';
import { SessionController } from './session.controller';
import { SessionRepository } from './session.repository';
import { SessionService } from './session.service';
import { TokenService } from './token.service';
import { TokenStatusCache } from './token-status-cache';
import { TokensController } from './tokens.controller';
import { TokensService } from './tokens.service';

/**
 * What checking a token needs, without the token routes: every role imports it (the metrics
 * route's own AuthGuard runs in processes without the api role).
 */
@Module({
  providers: [AuthRepository, TokenService],
  exports: [AuthRepository, TokenService],
})
export class AuthCoreModule {}

/**
 * The api role's authentication: the global guards, the token routes, the revocation cache and the
 * console's sign-in sessions.
 */
@Module({
  imports: [AuthCoreModule],
  controllers: [TokensController, SessionController],
  providers: [
    TokensService,
    TokenStatusCache,
    SessionRepository,
    SessionService,
    AuthGuard,
    // Order matters: authenticate (401/403) before validating input (400).
    { provide: APP_GUARD, useExisting: AuthGuard },
    { provide: APP_GUARD, useClass: ValidationGuard },
  ],
  exports: [AuthCoreModule, TokensService, TokenStatusCache, SessionService, AuthGuard],
})
export class AuthModule {}
