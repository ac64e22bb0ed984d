import { Injectable, type CanActivate, type ExecutionContext } from '@nestjs/common';
import { Reflector } from '@nestjs/core';
import type { FastifyRequest } from 'fastify';
import type { z } from 'zod';
import { badRequest, DomainError } from '../errors/domain-error';
import { acceptedTypes, JSON_TYPE, mediaType, unsupportedTypeMessage, YAML_TYPES } from './content-types';
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
    assertStorable(req.params, 'path');
    assertStorable(req.query, 'query');
    const params = spec.params ? parseInput(spec.params, req.params ?? {}, 'path') : {};
    const query = spec.query ? parseInput(spec.query, req.query ?? {}, 'query') : {};
    let body: unknown = undefined;
    if (spec.body) {
      checkContentType(req, spec);
      assertStorable(req.body, 'body');
      body = parseInput(spec.body, req.body, 'body');
    } else if (
      req.body !== undefined &&
      req.body !== null &&
      !(typeof req.body === 'object' && Object.keys(req.body).length === 0)
    ) {
      throw badRequest('UNEXPECTED_BODY', 'this route takes no request body');
    }
    requestState(req).input = { params, query, body };
    return true;
  }
}

/** A body must come as JSON or as one of the route's declared other content types (else 415). */
function checkContentType(req: FastifyRequest, spec: RouteSpec): void {
  const header = req.headers['content-type'];
  if (header === undefined || req.body === undefined) return;
  const type = mediaType(header);
  const declared = spec.bodyContentTypes ?? [];
  if (type === JSON_TYPE || type.endsWith('+json') || declared.includes(type)) return;
  // The YAML media types are aliases of one another.
  if (YAML_TYPES.includes(type) && declared.some((t) => YAML_TYPES.includes(t))) return;
  throw new DomainError(
    'UNSUPPORTED_MEDIA_TYPE',
    unsupportedTypeMessage(type, acceptedTypes(declared), 'by this route'),
    415,
  );
}

/** Deepest nesting accepted in any input (far beyond real documents; bounds every recursive walk after this one). */
export const MAX_INPUT_DEPTH = 256;

const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

function textProblem(s: string): string | undefined {
  if (s.includes('\u0000')) return 'contains a NUL character';
  if (LONE_SURROGATE.test(s)) return 'contains a lone surrogate (not valid Unicode)';
  return undefined;
}

/**
 * Refuses, anywhere in an input, what JSON.parse lets through but nothing downstream can hold:
 * NUL characters and lone surrogates (PostgreSQL text and jsonb reject them, UTF-8 cannot encode
 * them), non-finite numbers (`1e309` parses as Infinity: no JSON form, no canonical hash) and
 * nesting deeper than MAX_INPUT_DEPTH. Walks iteratively, so hostile depth cannot exhaust the stack.
 */
export function assertStorable(value: unknown, where: string): void {
  interface Node {
    v: unknown;
    key?: string;
    parent?: Node;
    depth: number;
  }
  const pathOf = (n: Node): string => {
    const keys: string[] = [];
    for (let x: Node | undefined = n; x?.key !== undefined; x = x.parent) keys.push(x.key);
    return [where, ...keys.reverse()].join('.');
  };
  const reject = (n: Node, message: string): never => {
    const path = pathOf(n);
    throw badRequest('VALIDATION_FAILED', `${path}: ${message}`, {
      issues: [{ path, message, code: 'invalid_value' }],
    });
  };
  const stack: Node[] = [{ v: value, depth: 0 }];
  while (stack.length > 0) {
    const n = stack.pop()!;
    const v = n.v;
    if (typeof v === 'string') {
      const p = textProblem(v);
      if (p) reject(n, p);
    } else if (typeof v === 'number') {
      if (!Number.isFinite(v)) reject(n, 'numbers must be finite (1e309 and the like have no JSON value)');
    } else if (v !== null && typeof v === 'object' && !Buffer.isBuffer(v)) {
      if (n.depth >= MAX_INPUT_DEPTH) reject(n, `nested deeper than ${MAX_INPUT_DEPTH} levels`);
      for (const [k, x] of Object.entries(v)) {
        const child: Node = { v: x, key: k, parent: n, depth: n.depth + 1 };
        const p = textProblem(k);
        if (p) reject(child, `key ${p}`);
        stack.push(child);
      }
    }
  }
}

/** `value` read with `schema`, or the 400 that names the first field it fails on (the routes' and the gateways' one rule). */
export function parseInput<S extends z.ZodType>(
  schema: S,
  value: unknown,
  where: 'path' | 'query' | 'body',
): z.output<S> {
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
