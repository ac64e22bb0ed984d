import type { BwrapSupport } from './modules/sandbox/bwrap';
import { SandboxService } from './modules/sandbox/sandbox.module';
import type { NestFastifyApplication } from '@nestjs/platform-fastify';
import path from 'node:path';
import type { Logger } from 'pino';
import type { OrdoConfig } from './core/config/config';
import { Database } from './core/database/database';
import type { EmbeddedPostgresHandle } from './core/database/embedded';
import { resolveDatabase, type ResolvedDatabase } from './core/database/resolve-database';
import { createHttpApp } from './core/http/app-factory';
import { PinoNestLogger } from './core/logging/logger';
import { startTelemetry } from './core/telemetry/tracing';
import { SigningKeys } from './modules/auth/signing-keys';
import { BootstrapService, type FirstStart } from './modules/tenants/bootstrap.service';
import { RootModule } from './roles/root.module';

export interface RunningOrdo {
  app: NestFastifyApplication;
  database: Database;
  url: string;
  firstStart?: FirstStart;
  embedded?: EmbeddedPostgresHandle;
  /** With the worker role: whether `cli` steps get their sandbox here, and why not. */
  sandbox?: BwrapSupport;
  close(): Promise<void>;
}

export { resolveDatabase, type ResolvedDatabase } from './core/database/resolve-database';

/** Starts the roles named in ORDO_ROLES against a resolved database. */
export async function startOrdo(config: OrdoConfig, log: Logger, db?: ResolvedDatabase): Promise<RunningOrdo> {
  startTelemetry(config);
  const resolved = db ?? (await resolveDatabase(config, log));
  const database = new Database(
    { app: resolved.appUrl, system: resolved.systemUrl, pooler: config.ORDO_POOLER_DATABASE_URL },
    {
      poolSize: config.ORDO_DB_POOL_SIZE,
      applicationName: `ordo:${config.ORDO_ROLES.join('+')}`,
      preparedStatements: config.ORDO_DB_PREPARED_STATEMENTS,
      chaosCommitErrorRate: config.ORDO_CHAOS_COMMIT_ERROR_RATE,
    },
  );
  const keys = await SigningKeys.open(config.ORDO_SIGNING_KEYS_DIR ?? path.join(config.home, 'keys'), { create: true });
  const app = await createHttpApp(RootModule.forRoles(config, database, keys), {
    bodyLimit: config.ORDO_BODY_LIMIT_BYTES,
    logger: new PinoNestLogger(log),
  });
  await app.init();
  const firstStart = config.ORDO_ROLES.includes('api') ? await app.get(BootstrapService).ensureFirstStart() : undefined;
  const sandbox = config.ORDO_ROLES.includes('worker')
    ? app.get(SandboxService, { strict: false }).available()
    : undefined;
  if (sandbox && !sandbox.ok)
    log.warn(
      { reason: sandbox.reason },
      config.ORDO_CLI_SANDBOX_REQUIRED
        ? 'cli steps will fail with SANDBOX_UNAVAILABLE: the sandbox cannot be built here'
        : 'cli steps will run UNSANDBOXED (ORDO_CLI_SANDBOX_REQUIRED=false): the sandbox cannot be built here',
    );
  await app.listen({ host: config.HOST, port: config.PORT });
  const address = app.getHttpServer().address();
  const port = typeof address === 'object' && address ? address.port : config.PORT;
  const host = config.HOST.includes(':') ? `[${config.HOST}]` : config.HOST;
  let closed = false;
  return {
    app,
    database,
    url: `http://${host}:${port}`,
    firstStart,
    embedded: resolved.embedded,
    sandbox,
    async close() {
      if (closed) return;
      closed = true;
      await app.close();
      await database.close();
      await resolved.embedded?.stop();
    },
  };
}
