import { Injectable, type CallHandler, type ExecutionContext, type NestInterceptor } from '@nestjs/common';
import type { FastifyRequest } from 'fastify';
import { Observable } from 'rxjs';
import { withLogContext } from '../../core/logging/log-context';
import { requestState } from '../../core/http/request-context';
import { traceIdOf } from '../../core/http/trace';

/** Runs each request's handler in a log context carrying its trace id and tenant. */
@Injectable()
export class LogContextInterceptor implements NestInterceptor {
  intercept(ctx: ExecutionContext, next: CallHandler): Observable<unknown> {
    if (ctx.getType() !== 'http') return next.handle();
    const req = ctx.switchToHttp().getRequest<FastifyRequest>();
    const p = requestState(req).principal;
    const fields = { trace_id: traceIdOf(req), tenant: p?.kind === 'tenant' ? p.tenantId : undefined };
    return new Observable((sub) => withLogContext(fields, () => next.handle().subscribe(sub)));
  }
}
