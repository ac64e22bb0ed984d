import { parseFlags, positionals, type Command } from '../command';
import type * as ConfigExports from '../config';
import type * as ResolveDatabaseExports from '../../core/database/resolve-database';

const help = `Usage: ordo migrate

Brings the database schema up to date (the numbered SQL migrations, then graphile-worker's
schema) under an advisory lock, as Ordo does at every start. Connects as the owner: DATABASE_URL,
or the embedded PostgreSQL under ORDO_HOME (joined when running, else started and stopped).`;

export const command: Command = {
  help,
  async run(args, io) {
    const parsed = parseFlags(args, {}, help, io);
    if (!parsed) return;
    positionals(parsed.positionals, [], help);
    /* eslint-disable @typescript-eslint/no-require-imports */
    const { cliConfig, cliLogger } = require('../config') as typeof ConfigExports;
    const { resolveDatabase } = require('../../core/database/resolve-database') as typeof ResolveDatabaseExports;
    /* eslint-enable @typescript-eslint/no-require-imports */
    const config = cliConfig(io);
    if (!config.DATABASE_URL && config.ORDO_APP_DATABASE_URL && config.ORDO_SYSTEM_DATABASE_URL) {
      throw new Error('migrate needs the owner connection: set DATABASE_URL');
    }
    const resolved = await resolveDatabase(config, cliLogger(io, 'info'));
    await resolved.embedded?.stop();
    io.out('database schema is current\n');
  },
};
