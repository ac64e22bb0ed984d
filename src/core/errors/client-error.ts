import http from 'node:http';
import type { Socket } from 'node:net';
import { lingeringClose } from '../http/lingering-close';
import { newTraceId } from '../http/trace';
import type { ErrorEnvelope } from './error-envelope';

/** An error Node's HTTP parser reports on a connection (`clientError`); `reason` is llhttp's text. */
export interface ClientError extends Error {
  code?: string;
  reason?: string;
}

/** Sockets already answered: the parser reports again for every chunk that arrives after its error. */
const answered = new WeakSet<Socket>();

/** The status, code and message for a request the HTTP parser refused. */
export function clientErrorAnswer(err: ClientError): { status: number; code: string; message: string } {
  switch (err.code) {
    case 'HPE_HEADER_OVERFLOW':
      return {
        status: 431,
        code: 'HEADERS_TOO_LARGE',
        message: `request line and headers exceed ${http.maxHeaderSize} bytes`,
      };
    case 'HPE_CHUNK_EXTENSIONS_OVERFLOW':
      return { status: 413, code: 'CHUNK_EXTENSIONS_TOO_LARGE', message: 'chunk extensions exceed the size limit' };
    case 'ERR_HTTP_REQUEST_TIMEOUT':
      return { status: 408, code: 'REQUEST_TIMEOUT', message: 'the request was not received in time' };
    default:
      return {
        status: 400,
        code: 'MALFORMED_REQUEST',
        message: `malformed HTTP request${err.reason ? ` (${err.reason.replace(/[^\x20-\x7e]/g, '?')})` : ''}`,
      };
  }
}

/**
 * Answers a request that Node's HTTP parser refused before any route saw it (headers over the size
 * limit, a malformed request line or header, a request that took too long) with the error
 * envelope and `Connection: close`, then closes the connection lingering, so that the client reads
 * the answer rather than a reset. Fastify's `clientErrorHandler`.
 */
export function answerClientError(err: ClientError, socket: Socket): void {
  if (answered.has(socket)) return;
  answered.add(socket);
  if (err.code === 'ECONNRESET' || socket.destroyed) return;
  // A response whose head is already on the wire cannot be followed by another one.
  const inFlight = (socket as Socket & { _httpMessage?: { headersSent?: boolean } })._httpMessage;
  if (!socket.writable || inFlight?.headersSent) {
    socket.destroy();
    return;
  }
  const { status, code, message } = clientErrorAnswer(err);
  const envelope: ErrorEnvelope = { error: { code, message, traceId: newTraceId() } };
  const body = JSON.stringify(envelope);
  socket.write(
    `HTTP/1.1 ${status} ${http.STATUS_CODES[status]}\r\nConnection: close\r\n` +
      `Content-Type: application/json; charset=utf-8\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
  );
  lingeringClose(socket);
}
