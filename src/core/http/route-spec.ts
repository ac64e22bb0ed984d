import { SetMetadata } from '@nestjs/common';
import type { z } from 'zod';

export const SCOPES = ['orchestrator:read', 'orchestrator:write', 'orchestrator:admin'] as const;
export type TenantScope = (typeof SCOPES)[number];
export const PLATFORM_SCOPE = 'platform:admin';
/** The scope of an external worker's token: the worker routes only, in its tenant and pool. */
export const WORKER_SCOPE = 'worker';
/** A scope a tenant's token may carry. */
export type TokenScope = TenantScope | typeof WORKER_SCOPE;
export type Access = TenantScope | typeof PLATFORM_SCOPE | typeof WORKER_SCOPE | 'public';

export interface RouteResponse {
  description: string;
  /** Absent for bodiless responses (204) and non-JSON ones (see `contentType`). */
  schema?: z.ZodType;
  contentType?: string;
  /**
   * Sequential forms of the same response a client may ask for with Accept, by media type, each
   * with the schema of one item (application/x-ndjson: one JSON value a line).
   */
  sequences?: Record<string, z.ZodType>;
}

/**
 * Everything the platform knows about a route: who may call it, how its input is validated and
 * what it answers. Validation (ValidationGuard) and the OpenAPI document both read this one spec.
 */
export interface RouteSpec {
  operationId: string;
  summary: string;
  tags: string[];
  access: Access;
  params?: z.ZodObject;
  query?: z.ZodObject;
  body?: z.ZodType;
  /** Content types accepted for the body besides JSON (e.g. application/yaml, application/gzip). */
  bodyContentTypes?: string[];
  responses: Record<number, RouteResponse>;
  /** Accepts `Idempotency-Key` (mutating tenant POSTs; default true for them). */
  idempotent?: boolean;
}

export const ROUTE_SPEC = 'ordo:route-spec';

export const Route = (spec: RouteSpec): MethodDecorator => SetMetadata(ROUTE_SPEC, spec);
