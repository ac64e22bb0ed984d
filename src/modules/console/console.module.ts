import { Module, type OnModuleInit } from '@nestjs/common';
import { HttpAdapterHost } from '@nestjs/core';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import path from 'node:path';
import { projectRoot } from '../../core/home/project-root';
import { traceIdOf } from '../../core/http/trace';
import { rootLogger } from '../../core/logging/logger';
import { ConsoleAssets } from './console-assets';

/**
 * The console's paths: each answers index.html, and the page routes itself from the address. Only
 * these paths do; anything else (every /api/** path included) keeps the API's own 404.
 */
export const CONSOLE_PATHS = [
  '/',
  '/sign-in',
  '/runs',
  '/runs/*',
  '/dags',
  '/dags/*',
  '/schedules',
  '/schedules/*',
  '/bundles',
  '/bundles/*',
  '/trust',
  '/tokens',
  '/usage',
  '/tenants',
  '/tenants/*',
  '/queues',
] as const;

/**
 * Serves the web console (built into dist/web) at / on the api role's listener. The files are read
 * once at start; without a build, the console's paths answer 503 saying how to build it.
 */
@Module({})
export class ConsoleModule implements OnModuleInit {
  private readonly log = rootLogger().child({ component: 'console' });

  constructor(private readonly adapterHost: HttpAdapterHost) {}

  onModuleInit(): void {
    const fastify = this.adapterHost.httpAdapter?.getInstance<FastifyInstance>();
    if (!fastify) return;
    const dir = path.join(projectRoot(), 'dist', 'web');
    const assets = ConsoleAssets.load(dir);
    if (!assets) this.log.warn({ dir }, 'the web console is not built (npm run build): its paths answer 503');

    const page = (_req: FastifyRequest, reply: FastifyReply) => {
      if (!assets) {
        return reply
          .code(503)
          .header('content-type', 'text/plain; charset=utf-8')
          .header('cache-control', 'no-store')
          .send('The web console is not built: run `npm run build`.\n');
      }
      // Always revalidated: it names the current asset files.
      return reply
        .header('content-type', 'text/html; charset=utf-8')
        .header('cache-control', 'no-cache')
        .send(assets.index);
    };
    for (const url of CONSOLE_PATHS) fastify.get(url, page);

    fastify.get<{ Params: { name: string } }>('/assets/:name', (req, reply) => {
      const file = assets?.asset(req.params.name);
      if (!file) {
        return reply
          .code(404)
          .header('content-type', 'application/json; charset=utf-8')
          .send({ error: { code: 'NOT_FOUND', message: 'asset not found', traceId: traceIdOf(req) } });
      }
      // The name carries a hash of the content: it may be cached for good.
      return reply
        .header('content-type', file.contentType)
        .header('cache-control', 'public, max-age=31536000, immutable')
        .send(file.body);
    });
  }
}
