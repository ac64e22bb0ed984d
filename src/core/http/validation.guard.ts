import { Injectable, type CanActivate, type ExecutionContext } from '@nestjs/common';
import { Reflector } from '@nestjs/core';
import type { FastifyRequest } from 'fastify';
import type { z } from 'zod';
import { badRequest, DomainError } from '../errors/domain-error';
import { YAML_TYPES } from './app-factory';
import { requestState } from './request-context';
import { ROUTE_SPEC, type RouteSpec } from './route-spec';

/** Parses params, query and body with the route's schemas; a mismatch is a 400 that names the field. */
@Injectable()
export class ValidationGuard implements CanActivate {
  constructor(private readonly reflector: Reflector) {}

  canActivate(ctx: ExecutionContext): boolean {
    if (ctx.getType() !== 'http') return true;
    const spec = this.reflector.get<RouteSpec | undefined>(ROUTE_SPEC, ctx.getHandler());
    if (!spec) return true;
    const req = ctx.switchToHttp().getRequest<FastifyRequest>();
    const params = spec.params ? parse(spec.params, req.params ?? {}, 'path') : {};
    const query = spec.query ? parse(spec.query, req.query ?? {}, 'query') : {};
    let body: unknown = undefined;
    if (spec.body) {
      checkContentType(req, spec);
      body = parse(spec.body, req.body, 'body');
    } else if (
      req.body !== undefined &&
      req.body !== null &&
      !(typeof req.body === 'object' && Object.keys(req.body).length === 0)
    ) {
      throw badRequest('UNEXPECTED_BODY', 'this route takes no request body');
    }
    requestState(req).input = {
      params: params as Record<string, unknown>,
      query: query as Record<string, unknown>,
      body,
    };
    return true;
  }
}

/** A body must come as JSON or as one of the route's declared other content types (else 415). */
function checkContentType(req: FastifyRequest, spec: RouteSpec): void {
  const header = req.headers['content-type'];
  if (header === undefined || req.body === undefined) return;
  const type = header.split(';')[0].trim().toLowerCase();
  const declared = spec.bodyContentTypes ?? [];
  if (type === 'application/json' || type.endsWith('+json') || declared.includes(type)) return;
  // The YAML media types are aliases of one another.
  if (YAML_TYPES.includes(type) && declared.some((t) => YAML_TYPES.includes(t))) return;
  throw new DomainError(
    'UNSUPPORTED_MEDIA_TYPE',
    `content type ${type} is not accepted here (use application/json)`,
    415,
  );
}

function parse(schema: z.ZodType, value: unknown, where: 'path' | 'query' | 'body'): unknown {
  const r = schema.safeParse(value);
  if (r.success) return r.data;
  const issues = r.error.issues.map((i) => ({
    path: [where, ...i.path.map(String)].join('.'),
    message: i.message,
    code: i.code,
  }));
  const first = issues[0];
  const code = where === 'body' && value === undefined ? 'MISSING_BODY' : 'VALIDATION_FAILED';
  throw badRequest(code, `${first.path}: ${first.message}`, { issues });
}
