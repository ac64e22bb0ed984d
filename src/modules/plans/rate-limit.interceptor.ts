import { Injectable, type CallHandler, type ExecutionContext, type NestInterceptor } from '@nestjs/common';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { Observable, catchError, tap, throwError } from 'rxjs';
import { requestState } from '../../core/http/request-context';
import { LimitHits } from './limit-hits';
import { collectingLimits } from './rate-limit-context';
import { rateLimitFields } from './rate-limit-fields';

/**
 * What a tenant's request answers about its limits beyond the request guard: a success that took
 * from the run bucket carries the RateLimit fields of every limit it was checked against, and a
 * limit refusal raised on the way (RATE_LIMITED, QUOTA_EXCEEDED) counts as the tenant's limit hit.
 */
@Injectable()
export class RateLimitInterceptor implements NestInterceptor {
  constructor(private readonly hits: LimitHits) {}

  intercept(ctx: ExecutionContext, next: CallHandler): Observable<unknown> {
    if (ctx.getType() !== 'http') return next.handle();
    const req = ctx.switchToHttp().getRequest<FastifyRequest>();
    const reply = ctx.switchToHttp().getResponse<FastifyReply>();
    const p = requestState(req).principal;
    if (p?.kind !== 'tenant' && p?.kind !== 'worker') return next.handle();
    // Subscribed inside the collecting context, so that the handler's work runs in it.
    return new Observable((subscriber) =>
      collectingLimits(req, (checked) => {
        const byGuard = checked.length;
        return next
          .handle()
          .pipe(
            tap(() => {
              if (checked.length > byGuard) void reply.headers(rateLimitFields(checked));
            }),
            catchError((e: unknown) => {
              this.hits.recordError(p.tenantId, e);
              return throwError(() => e);
            }),
          )
          .subscribe(subscriber);
      }),
    );
  }
}
