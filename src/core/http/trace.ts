import { randomBytes } from 'node:crypto';
import type { FastifyRequest } from 'fastify';

const TRACE_ID = Symbol('ordo.traceId');
type WithTrace = FastifyRequest & { [TRACE_ID]?: string };

const TRACEPARENT = /^[0-9a-f]{2}-([0-9a-f]{32})-[0-9a-f]{16}-[0-9a-f]{2}$/;

export function newTraceId(): string {
  return randomBytes(16).toString('hex');
}

/** The request's trace id: from a valid W3C `traceparent` header, else a fresh one, fixed per request. */
export function traceIdOf(req: FastifyRequest): string {
  const r = req as WithTrace;
  if (r[TRACE_ID]) return r[TRACE_ID];
  const header = req.headers?.traceparent;
  const m = typeof header === 'string' ? TRACEPARENT.exec(header) : null;
  const id = m && m[1] !== '0'.repeat(32) ? m[1] : newTraceId();
  r[TRACE_ID] = id;
  return id;
}
