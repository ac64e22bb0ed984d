import { randomBytes } from 'node:crypto';
import type { FastifyRequest } from 'fastify';
import type { IncomingMessage } from 'node:http';

const TRACE_ID = Symbol('ordo.traceId');
type WithTrace = (FastifyRequest | IncomingMessage) & { [TRACE_ID]?: string };

const TRACEPARENT = /^[0-9a-f]{2}-([0-9a-f]{32})-[0-9a-f]{16}-[0-9a-f]{2}$/;

// Random bytes are drawn in blocks: one system call per 256 trace ids instead of one per id.
const BLOCK = 4096;
let block = Buffer.alloc(0);
let offset = BLOCK;

/** A fresh W3C trace id: 16 random bytes as 32 lowercase hex digits (never all zeros). */
export function newTraceId(): string {
  if (offset + 16 > block.length) {
    block = randomBytes(BLOCK);
    offset = 0;
  }
  const id = block.toString('hex', offset, offset + 16);
  offset += 16;
  return id === '0'.repeat(32) ? newTraceId() : id;
}

/**
 * The request's trace id (a route's, or a WebSocket upgrade's): from a valid W3C `traceparent`
 * header, else a fresh one, fixed per request.
 */
export function traceIdOf(req: FastifyRequest | IncomingMessage): string {
  const r = req as WithTrace;
  if (r[TRACE_ID]) return r[TRACE_ID];
  const header = req.headers?.traceparent;
  const m = typeof header === 'string' ? TRACEPARENT.exec(header) : null;
  const id = m && m[1] !== '0'.repeat(32) ? m[1] : newTraceId();
  r[TRACE_ID] = id;
  return id;
}
