import { Injectable, type CallHandler, type ExecutionContext, type NestInterceptor } from '@nestjs/common';
import { Reflector } from '@nestjs/core';
import { canonicalJson } from '../../core/json/canonical-json';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { createHash } from 'node:crypto';
import { from, lastValueFrom, type Observable } from 'rxjs';
import { Database } from '../../core/database/database';
import { badRequest, conflict, DomainError, unprocessable } from '../../core/errors/domain-error';
import { toEnvelope } from '../../core/errors/http-exception.filter';
import { requestState } from '../../core/http/request-context';
import { ROUTE_SPEC, type RouteSpec } from '../../core/http/route-spec';
import { traceIdOf } from '../../core/http/trace';
import { IdempotencyRepository } from './idempotency.repository';

const KEY = /^[\x21-\x7e]{1,255}$/;
const TTL_SECONDS = 24 * 3600;
const STALE_AFTER_SECONDS = 120;

/**
 * `Idempotency-Key` on mutating tenant POSTs (IETF httpapi-idempotency-key draft): the first
 * request with a key runs and its response is stored; a replay with the same body gets the stored
 * response; the same key with another body is 422; a duplicate while the first runs is 409.
 * 4xx answers are stored like successes; a 5xx or a 429 (a quota or rate limit: the same request
 * may pass later) releases the key so the client can retry.
 */
/** Fingerprint of a request for Idempotency-Key comparison: method, path and the validated body (canonical JSON). */
export function requestHash(method: string, path: string, body: unknown): string {
  return createHash('sha256')
    .update(`${method} ${path}\n${canonicalJson(body ?? null)}`)
    .digest('hex');
}

@Injectable()
export class IdempotencyInterceptor implements NestInterceptor {
  constructor(
    private readonly reflector: Reflector,
    private readonly db: Database,
    private readonly repo: IdempotencyRepository,
  ) {}

  intercept(ctx: ExecutionContext, next: CallHandler): Observable<unknown> {
    if (ctx.getType() !== 'http') return next.handle();
    const req = ctx.switchToHttp().getRequest<FastifyRequest>();
    const spec = this.reflector.get<RouteSpec | undefined>(ROUTE_SPEC, ctx.getHandler());
    const principal = requestState(req).principal;
    const raw = req.headers['idempotency-key'];
    if (
      req.method !== 'POST' ||
      !spec ||
      spec.idempotent === false ||
      principal?.kind !== 'tenant' ||
      raw === undefined
    ) {
      return next.handle();
    }
    return from(this.run(ctx, next, principal.tenantId, raw));
  }

  private async run(
    ctx: ExecutionContext,
    next: CallHandler,
    tenantId: string,
    raw: string | string[],
  ): Promise<unknown> {
    const req = ctx.switchToHttp().getRequest<FastifyRequest>();
    const reply = ctx.switchToHttp().getResponse<FastifyReply>();
    const key = Array.isArray(raw) ? raw[0] : raw;
    if (Array.isArray(raw) || !KEY.test(key))
      throw badRequest('INVALID_IDEMPOTENCY_KEY', 'Idempotency-Key must be 1-255 printable ASCII characters');
    const path = req.url.split('?')[0];
    const hash = requestHash(req.method, path, requestState(req).input?.body);

    const owned = await this.db.withTenant(tenantId, async (tx) => {
      if (await this.repo.claim(tx, { key, method: req.method, path, hash, ttlSeconds: TTL_SECONDS })) return true;
      const rec = await this.repo.find(tx, key, STALE_AFTER_SECONDS);
      if (!rec) return false;
      if (rec.request_hash !== hash)
        throw unprocessable('IDEMPOTENCY_KEY_REUSED', 'Idempotency-Key was used with a different request');
      if (rec.state === 'done') {
        void reply.status(rec.response_status ?? 200).header('idempotent-replayed', 'true');
        return { replay: rec.response_body };
      }
      if (rec.stale && (await this.repo.takeOver(tx, key, hash, STALE_AFTER_SECONDS))) return true;
      throw conflict('IDEMPOTENCY_IN_PROGRESS', 'a request with this Idempotency-Key is still being processed');
    });
    if (owned === false)
      throw conflict('IDEMPOTENCY_IN_PROGRESS', 'a request with this Idempotency-Key is still being processed');
    if (owned !== true) return owned.replay;

    try {
      const result = await lastValueFrom(next.handle(), { defaultValue: undefined });
      await this.db.withTenant(tenantId, (tx) => this.repo.complete(tx, key, reply.statusCode, result));
      return result;
    } catch (e) {
      if (e instanceof DomainError && e.status < 500 && e.status !== 429) {
        const { status, body } = toEnvelope(e, traceIdOf(req));
        await this.db.withTenant(tenantId, (tx) => this.repo.complete(tx, key, status, body));
      } else {
        await this.db.withTenant(tenantId, (tx) => this.repo.release(tx, key)).catch(() => undefined);
      }
      throw e;
    }
  }
}
