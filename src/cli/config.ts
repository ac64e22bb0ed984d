import pino, { type Logger } from 'pino';
import { Writable } from 'node:stream';
import { loadConfig, type OrdoConfig } from '../core/config/config';
import type { CliIo } from './command';

/** Log lines (migrations applied, embedded PostgreSQL) go to stderr as plain text, never to stdout. */
export function cliLogger(io: CliIo, level: string): Logger {
  const dest = new Writable({
    write(chunk: Buffer, _enc, done) {
      for (const line of chunk.toString('utf8').split('\n').filter(Boolean)) {
        try {
          const o = JSON.parse(line) as { msg?: string };
          if (o.msg) io.err(`ordo: ${o.msg}\n`);
        } catch {
          io.err(`${line}\n`);
        }
      }
      done();
    },
  });
  return pino({ level, base: undefined, timestamp: false }, dest);
}

export function cliConfig(io: CliIo): OrdoConfig {
  return loadConfig(io.env);
}
