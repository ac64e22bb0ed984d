import compress from '@fastify/compress';
import { NestFactory } from '@nestjs/core';
import { FastifyAdapter, type NestFastifyApplication } from '@nestjs/platform-fastify';
import type { DynamicModule, LoggerService } from '@nestjs/common';
import { HttpExceptionFilter } from '../errors/http-exception.filter';

export const YAML_TYPES = ['application/yaml', 'application/x-yaml', 'text/yaml'];
export const BINARY_TYPES = ['application/gzip', 'application/x-gzip', 'application/x-tar', 'application/octet-stream'];

/**
 * Builds the Nest application on Fastify with the platform's HTTP conventions: body limit (413),
 * JSON / YAML / binary bodies, gzip and brotli responses, and the error envelope for every failure,
 * including those raised by Fastify before routing (malformed JSON, unknown routes).
 */
export async function createHttpApp(
  root: DynamicModule,
  opts: { bodyLimit: number; logger: LoggerService | false },
): Promise<NestFastifyApplication> {
  const adapter = new FastifyAdapter({ bodyLimit: opts.bodyLimit, trustProxy: false, return503OnClosing: true });
  const app = await NestFactory.create<NestFastifyApplication>(root, adapter, {
    logger: opts.logger,
    bufferLogs: false,
    abortOnError: false,
  });
  const fastify = app.getHttpAdapter().getInstance();
  await fastify.register(compress, { global: true, encodings: ['br', 'gzip'], threshold: 1024 });
  fastify.addContentTypeParser(YAML_TYPES, { parseAs: 'string', bodyLimit: opts.bodyLimit }, (_req, body, done) =>
    done(null, body),
  );
  fastify.addContentTypeParser(BINARY_TYPES, { parseAs: 'buffer', bodyLimit: opts.bodyLimit }, (_req, body, done) =>
    done(null, body),
  );
  app.useGlobalFilters(new HttpExceptionFilter());
  return app;
}
