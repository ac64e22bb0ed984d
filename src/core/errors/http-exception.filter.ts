import { Catch, HttpException, Logger, type ArgumentsHost, type ExceptionFilter } from '@nestjs/common';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { DomainError } from './domain-error';
import type { ErrorEnvelope } from './error-envelope';
import { mediaType, PARSED_TYPES, unsupportedTypeMessage } from '../http/content-types';
import { drainRequest } from '../http/lingering-close';
import { traceIdOf } from '../http/trace';

interface FastifyLikeError {
  statusCode?: number;
  code?: string;
  message?: string;
}

export interface EnvelopeOptions {
  /** ORDO_BODY_LIMIT_BYTES, named in the answer to a body over it. */
  bodyLimit?: number;
  /** The request's Content-Type header, named in a 415. */
  contentType?: string;
}

/**
 * Maps every failure to the one error envelope; unknown errors become a bare 500 with the trace id.
 * A body refused as too large is read to its end (within bounds) before the 413 goes out with
 * `Connection: close`: closing while the client still sends would reset the connection, and the
 * client could lose the answer.
 */
@Catch()
export class HttpExceptionFilter implements ExceptionFilter {
  private readonly logger = new Logger('http');

  constructor(private readonly opts: EnvelopeOptions = {}) {}

  catch(exception: unknown, host: ArgumentsHost): void {
    const ctx = host.switchToHttp();
    const req = ctx.getRequest<FastifyRequest>();
    const reply = ctx.getResponse<FastifyReply>();
    const traceId = traceIdOf(req);
    const { status, body } = toEnvelope(exception, traceId, { ...this.opts, contentType: req.headers['content-type'] });
    if (status >= 500) this.logger.error({ err: exception, traceId, url: req.url }, 'request failed');
    if (exception instanceof DomainError && exception.headers) void reply.headers(exception.headers);
    const send = () => void reply.status(status).header('content-type', 'application/json; charset=utf-8').send(body);
    if (status === 413 && !req.raw.complete) {
      void reply.header('connection', 'close');
      void drainRequest(req.raw).then(send);
    } else {
      send();
    }
  }
}

export function toEnvelope(
  exception: unknown,
  traceId: string,
  opts: EnvelopeOptions = {},
): { status: number; body: ErrorEnvelope } {
  const env = (code: string, message: string, details?: unknown): ErrorEnvelope => ({
    error: { code, message, traceId, ...(details === undefined ? {} : { details }) },
  });
  const tooLarge =
    opts.bodyLimit === undefined
      ? 'request body exceeds the configured limit'
      : `request body exceeds the limit of ${opts.bodyLimit} bytes (ORDO_BODY_LIMIT_BYTES)`;
  const unsupported = unsupportedTypeMessage(
    opts.contentType === undefined ? undefined : mediaType(opts.contentType),
    PARSED_TYPES,
    'here',
  );
  if (exception instanceof DomainError) {
    return { status: exception.status, body: env(exception.code, exception.message, exception.details) };
  }
  if (exception instanceof HttpException) {
    const status = exception.getStatus();
    if (status === 404) return { status, body: env('ROUTE_NOT_FOUND', 'no such route') };
    if (status === 405) return { status, body: env('METHOD_NOT_ALLOWED', 'method not allowed on this route') };
    if (status === 413) return { status, body: env('PAYLOAD_TOO_LARGE', tooLarge) };
    const cause = exception.cause as FastifyLikeError | undefined;
    if (
      status === 400 &&
      (cause?.code === 'FST_ERR_CTP_INVALID_JSON_BODY' || /not valid JSON/i.test(exception.message))
    ) {
      return { status, body: env('MALFORMED_JSON', 'request body is not valid JSON') };
    }
    if (
      status === 400 &&
      (cause?.code === 'FST_ERR_CTP_EMPTY_JSON_BODY' || /Body cannot be empty/i.test(exception.message))
    ) {
      return { status, body: env('MALFORMED_JSON', 'body is empty but content-type is application/json') };
    }
    if (status === 415) return { status, body: env('UNSUPPORTED_MEDIA_TYPE', unsupported) };
    if (status < 500) return { status, body: env('BAD_REQUEST', exception.message) };
    return { status: 500, body: env('INTERNAL', 'internal error') };
  }
  const fe = exception as FastifyLikeError | undefined;
  if (fe && typeof fe.statusCode === 'number' && fe.statusCode >= 400 && fe.statusCode < 500) {
    switch (fe.code) {
      case 'FST_ERR_CTP_BODY_TOO_LARGE':
        return { status: 413, body: env('PAYLOAD_TOO_LARGE', tooLarge) };
      case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
        return { status: 415, body: env('UNSUPPORTED_MEDIA_TYPE', unsupported) };
      case 'ROUTE_NOT_FOUND':
        return { status: 404, body: env('ROUTE_NOT_FOUND', 'no such route') };
      case 'FST_ERR_MAX_PARAM_LENGTH':
        return {
          status: 414,
          body: env('PATH_PARAMETER_TOO_LONG', 'a path parameter is longer than the router accepts'),
        };
      case 'FST_ERR_BAD_URL':
        return { status: 400, body: env('MALFORMED_URL', 'the URL path is not validly percent-encoded') };
      case 'FST_ERR_CTP_EMPTY_JSON_BODY':
        return { status: 400, body: env('MALFORMED_JSON', 'body is empty but content-type is application/json') };
      default:
        if (fe instanceof SyntaxError || fe.code === 'FST_ERR_CTP_INVALID_JSON_BODY') {
          return { status: 400, body: env('MALFORMED_JSON', 'request body is not valid JSON') };
        }
        return { status: fe.statusCode, body: env('BAD_REQUEST', fe.message ?? 'bad request') };
    }
  }
  return { status: 500, body: env('INTERNAL', 'internal error') };
}
