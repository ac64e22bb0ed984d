import { createParamDecorator, type ExecutionContext } from '@nestjs/common';
import type { FastifyRequest } from 'fastify';
import type { TenantScope } from './route-spec';

export type Principal =
  | { kind: 'tenant'; tenantId: string; subject: string; scopes: TenantScope[]; jti: string }
  | { kind: 'platform'; subject: string; jti: string }
  /** An external worker: its tenant, and the pool its token is bound to. */
  /** `exp`: the token's expiry (seconds since the epoch), which a long-lived call checks again. */
  | { kind: 'worker'; tenantId: string; subject: string; pool: string; jti: string; exp: number }
  | { kind: 'anonymous' };

export interface ValidatedInput {
  params: Record<string, unknown>;
  query: Record<string, unknown>;
  body: unknown;
}

export interface OrdoRequestState {
  principal?: Principal;
  input?: ValidatedInput;
}

const STATE = Symbol('ordo.request');
type WithState = FastifyRequest & { [STATE]?: OrdoRequestState };

export function requestState(req: FastifyRequest): OrdoRequestState {
  const r = req as WithState;
  return (r[STATE] ??= {});
}

/** The authenticated tenant principal (routes whose access is a tenant scope). */
export const TenantPrincipal = createParamDecorator((_: unknown, ctx: ExecutionContext) => {
  const p = requestState(ctx.switchToHttp().getRequest<FastifyRequest>()).principal;
  if (p?.kind !== 'tenant') throw new Error('route has no tenant principal');
  return p;
});

export const PlatformPrincipal = createParamDecorator((_: unknown, ctx: ExecutionContext) => {
  const p = requestState(ctx.switchToHttp().getRequest<FastifyRequest>()).principal;
  if (p?.kind !== 'platform') throw new Error('route has no platform principal');
  return p;
});

/** The authenticated worker principal (routes whose access is `worker`). */
export const WorkerPrincipal = createParamDecorator((_: unknown, ctx: ExecutionContext) => {
  const p = requestState(ctx.switchToHttp().getRequest<FastifyRequest>()).principal;
  if (p?.kind !== 'worker') throw new Error('route has no worker principal');
  return p;
});

/** Validated params / query / body, as parsed by the route's schemas. */
export const Params = createParamDecorator(
  (_: unknown, ctx: ExecutionContext) => requestState(ctx.switchToHttp().getRequest<FastifyRequest>()).input?.params,
);
export const Query = createParamDecorator(
  (_: unknown, ctx: ExecutionContext) => requestState(ctx.switchToHttp().getRequest<FastifyRequest>()).input?.query,
);
export const Body = createParamDecorator(
  (_: unknown, ctx: ExecutionContext) => requestState(ctx.switchToHttp().getRequest<FastifyRequest>()).input?.body,
);

export type TenantPrincipalT = Extract<Principal, { kind: 'tenant' }>;
export type PlatformPrincipalT = Extract<Principal, { kind: 'platform' }>;
export type WorkerPrincipalT = Extract<Principal, { kind: 'worker' }>;
