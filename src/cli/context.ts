import 'reflect-metadata';
import { Global, Module, type DynamicModule, type Type } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import type { OrdoConfig } from '../core/config/config';
import { ConfigModule } from '../core/config/config.module';
import { Database } from '../core/database/database';
import { DatabaseModule } from '../core/database/database.module';
import { createRootLogger } from '../core/logging/logger';
import { SigningKeys, signingKeysDir } from '../modules/auth/signing-keys';
import { resolveDatabase } from '../core/database/resolve-database';
import type { CliIo } from './command';
import { cliConfig, cliLogger } from './config';

@Global()
@Module({})
class CliKeysModule {
  static forRoot(keys: SigningKeys): DynamicModule {
    return { module: CliKeysModule, providers: [{ provide: SigningKeys, useValue: keys }], exports: [SigningKeys] };
  }
}

@Module({})
class CliModule {
  static forRoot(config: OrdoConfig, database: Database, keys: SigningKeys, modules: Type[]): DynamicModule {
    return {
      module: CliModule,
      imports: [
        ConfigModule.forRoot(config),
        DatabaseModule.forRoot(database),
        CliKeysModule.forRoot(keys),
        ...modules,
      ],
    };
  }
}

export interface CliContext {
  config: OrdoConfig;
  database: Database;
  keys: SigningKeys;
  /** A provider of one of the modules passed to `withContext`. */
  get<T>(type: Type<T>): T;
}

/**
 * Runs `fn` against the same database and signing keys as the server (DATABASE_URL, or the
 * embedded PostgreSQL under ORDO_HOME, joined when it runs and started then stopped when not),
 * with the given Nest modules' services. The schema is brought up to date first, as at start.
 */
export async function withContext<T>(io: CliIo, modules: Type[], fn: (ctx: CliContext) => Promise<T>): Promise<T> {
  const config = cliConfig(io);
  // The services' own loggers (rootLogger) log at LOG_LEVEL, as in the server.
  createRootLogger(config.LOG_LEVEL);
  const log = cliLogger(io, config.LOG_LEVEL === 'info' ? 'warn' : config.LOG_LEVEL);
  const resolved = await resolveDatabase(config, log);
  let database: Database | undefined;
  let app: Awaited<ReturnType<typeof NestFactory.createApplicationContext>> | undefined;
  try {
    database = new Database(
      { app: resolved.appUrl, system: resolved.systemUrl, pooler: config.ORDO_POOLER_DATABASE_URL },
      {
        poolSize: 4,
        applicationName: 'ordo:cli',
        preparedStatements: config.ORDO_DB_PREPARED_STATEMENTS,
        chaosCommitErrorRate: config.ORDO_CHAOS_COMMIT_ERROR_RATE,
      },
    );
    const keys = await SigningKeys.open(signingKeysDir(config), { create: true });
    app = await NestFactory.createApplicationContext(CliModule.forRoot(config, database, keys, modules), {
      logger: false,
      abortOnError: false,
    });
    const ctx = app;
    return await fn({ config, database, keys, get: (type) => ctx.get(type, { strict: false }) });
  } finally {
    await app?.close().catch(() => undefined);
    await database?.close();
    await resolved.embedded?.stop();
  }
}
