import compress from '@fastify/compress';
import helmet from '@fastify/helmet';
import { NestFactory } from '@nestjs/core';
import { FastifyAdapter, type NestFastifyApplication } from '@nestjs/platform-fastify';
import type { DynamicModule, LoggerService } from '@nestjs/common';
import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify';
import { answerClientError } from '../errors/client-error';
import { badRequest } from '../errors/domain-error';
import { HttpExceptionFilter, toEnvelope } from '../errors/http-exception.filter';
import { jsonSyntaxError } from '../json/json-syntax';
import { HttpClosing } from './http-closing';
import { traceIdOf } from './trace';

import { BINARY_TYPES, YAML_TYPES } from './content-types';

export { BINARY_TYPES, YAML_TYPES } from './content-types';

/**
 * Builds the Nest application on Fastify with the platform's HTTP conventions: body limit (413),
 * JSON / YAML / binary bodies, gzip and brotli responses, the security headers (see
 * SECURITY_HEADERS), and the error envelope for every failure,
 * including those raised by Fastify before routing (malformed JSON, unknown routes, overlong path
 * parameters, bad percent-encoding) and by Node's HTTP parser before Fastify (oversized headers,
 * malformed requests).
 */
export async function createHttpApp(
  root: DynamicModule,
  opts: { bodyLimit: number; logger: LoggerService | false },
): Promise<NestFastifyApplication> {
  const adapter = new FastifyAdapter({
    bodyLimit: opts.bodyLimit,
    trustProxy: false,
    return503OnClosing: true,
    clientErrorHandler: answerClientError,
    // The router's refusals (a path parameter over its length limit, a malformed percent-encoding).
    frameworkErrors: (error: FastifyError, request: FastifyRequest, reply: FastifyReply) => {
      const { status, body } = toEnvelope(error, traceIdOf(request));
      void reply.code(status).header('content-type', 'application/json; charset=utf-8').send(body);
    },
  });
  const app = await NestFactory.create<NestFastifyApplication>(root, adapter, {
    logger: opts.logger,
    bufferLogs: false,
    abortOnError: false,
    // The body parsers are the ones below; no route takes form bodies.
    bodyParser: false,
  });
  const fastify = app.getHttpAdapter().getInstance();
  // Once the application begins to close, each response ends its connection (a connection kept
  // alive would hold the HTTP server's close up to its keep-alive timeout, Fastify's 72 s); the
  // idle ones are closed when that close begins and new requests are answered 503.
  const http = app.get(HttpClosing, { strict: false });
  fastify.addHook('onSend', (_request, reply, payload, done) => {
    if (http.closing) void reply.header('connection', 'close');
    done(null, payload);
  });
  await fastify.register(compress, { global: true, encodings: ['br', 'gzip'], threshold: 1024 });
  await fastify.register(helmet, SECURITY_HEADERS);
  // Fastify's own JSON parser (it refuses __proto__ and constructor.prototype keys), with a message
  // that names where a malformed body breaks.
  const json = fastify.getDefaultJsonParser('error', 'error');
  fastify.removeContentTypeParser('application/json');
  fastify.addContentTypeParser(
    'application/json',
    { parseAs: 'string', bodyLimit: opts.bodyLimit },
    (req, body, done) => {
      const text = body as string;
      void json(req, text, (err, value) => {
        if ((err as { code?: string } | null)?.code !== 'FST_ERR_CTP_INVALID_JSON_BODY') return done(err, value);
        done(malformedJson(text), undefined);
      });
    },
  );
  fastify.addContentTypeParser(YAML_TYPES, { parseAs: 'string', bodyLimit: opts.bodyLimit }, (_req, body, done) =>
    done(null, body),
  );
  fastify.addContentTypeParser(BINARY_TYPES, { parseAs: 'buffer', bodyLimit: opts.bodyLimit }, (_req, body, done) =>
    done(null, body),
  );
  app.useGlobalFilters(new HttpExceptionFilter({ bodyLimit: opts.bodyLimit }));
  return app;
}

/**
 * Headers on every response, the console's pages and the API alike: a Content-Security-Policy
 * that allows scripts, styles and connections from this origin only (no inline script or style,
 * no eval), no framing, no plugins, no <base>; nosniff; no Referer; X-Frame-Options DENY. No
 * Strict-Transport-Security: whoever terminates TLS for the host decides it, as it binds every
 * port and path of that host.
 */
const SECURITY_HEADERS = {
  global: true,
  contentSecurityPolicy: {
    useDefaults: false,
    directives: {
      defaultSrc: ["'self'"],
      scriptSrc: ["'self'"],
      styleSrc: ["'self'"],
      imgSrc: ["'self'", 'data:'],
      connectSrc: ["'self'"],
      frameAncestors: ["'none'"],
      baseUri: ["'none'"],
      formAction: ["'self'"],
      objectSrc: ["'none'"],
    },
  },
  referrerPolicy: { policy: 'no-referrer' as const },
  frameguard: { action: 'deny' as const },
  strictTransportSecurity: false,
};

/** The 400 for a JSON body the parser refused: where its syntax breaks, or the key it may not have. */
function malformedJson(text: string): Error {
  const e = jsonSyntaxError(text);
  if (!e) {
    return badRequest(
      'MALFORMED_JSON',
      'request body has a "__proto__" or "constructor.prototype" key, which is refused',
    );
  }
  return badRequest(
    'MALFORMED_JSON',
    `request body is not valid JSON: ${e.reason} at line ${e.line}, column ${e.column}`,
    { line: e.line, column: e.column },
  );
}
