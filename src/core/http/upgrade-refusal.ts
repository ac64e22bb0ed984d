import http, { type IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import type { VerifyClientCallbackAsync } from 'ws';
import type { ErrorEnvelope } from '../errors/error-envelope';
import { traceIdOf } from './trace';

/** The error envelope of a refused upgrade, as a body: the request's trace id, as for a route. */
function upgradeRefusalBody(req: IncomingMessage, code: string, message: string): string {
  const envelope: ErrorEnvelope = { error: { code, message, traceId: traceIdOf(req) } };
  return JSON.stringify(envelope);
}

/**
 * Answers an upgrade request with an HTTP error in the API's error envelope (and `headers`), then
 * closes the socket once the answer is written: an upgrade's socket has no server timeout, so a
 * client that never closes its end does not hold it.
 */
export function refuseUpgrade(
  socket: Duplex,
  req: IncomingMessage,
  status: number,
  code: string,
  message: string,
  headers: Record<string, string> = {},
): void {
  if (socket.destroyed) return;
  const body = upgradeRefusalBody(req, code, message);
  const extra = Object.entries(headers)
    .map(([k, v]) => `${k}: ${v}\r\n`)
    .join('');
  socket.once('finish', () => socket.destroy());
  socket.end(
    `HTTP/1.1 ${status} ${http.STATUS_CODES[status] ?? 'Error'}\r\nConnection: close\r\nContent-Type: application/json\r\n${extra}Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
  );
}

/** Refuses an upgrade from a gateway's `verifyClient` (`done`) with `err`'s status and code, in the error envelope. */
export function refuseVerification(
  done: Parameters<VerifyClientCallbackAsync>[1],
  req: IncomingMessage,
  err: { status: number; code: string; message: string },
): void {
  done(false, err.status, upgradeRefusalBody(req, err.code, err.message), { 'Content-Type': 'application/json' });
}
