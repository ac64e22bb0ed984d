import path from 'node:path';
import type { Logger } from 'pino';
import type { OrdoConfig } from '../config/config';
import { startEmbeddedPostgres, type EmbeddedPostgresHandle } from './embedded';
import { migrate } from './migrator';

export interface ResolvedDatabase {
  ownerUrl?: string;
  appUrl: string;
  systemUrl: string;
  embedded?: EmbeddedPostgresHandle;
}

/** Finds (or starts) PostgreSQL and brings its schema up to date. */
export async function resolveDatabase(config: OrdoConfig, log: Logger): Promise<ResolvedDatabase> {
  let embedded: EmbeddedPostgresHandle | undefined;
  let ownerUrl = config.DATABASE_URL;
  if (!ownerUrl) {
    if (config.ORDO_APP_DATABASE_URL && config.ORDO_SYSTEM_DATABASE_URL) {
      return { appUrl: config.ORDO_APP_DATABASE_URL, systemUrl: config.ORDO_SYSTEM_DATABASE_URL };
    }
    embedded = await startEmbeddedPostgres(path.join(config.home, 'pg'), {
      port: config.ORDO_EMBEDDED_PG_PORT,
      log: (line) => log.debug({ component: 'embedded-postgres' }, line),
    });
    ownerUrl = embedded.ownerUrl;
  }
  const m = await migrate(ownerUrl, {
    log: (msg) => log.info(msg),
    timeouts: {
      statementMs: config.ORDO_DB_STATEMENT_TIMEOUT_MS,
      idleInTransactionMs: config.ORDO_DB_IDLE_IN_TRANSACTION_TIMEOUT_MS,
    },
  });
  return {
    ownerUrl,
    appUrl: config.ORDO_APP_DATABASE_URL ?? m.appUrl,
    systemUrl: config.ORDO_SYSTEM_DATABASE_URL ?? m.systemUrl,
    embedded,
  };
}
