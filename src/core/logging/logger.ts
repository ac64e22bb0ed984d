import type { LoggerService } from '@nestjs/common';
import pino, { type Logger } from 'pino';

/** Paths whose values never reach a log line: credentials, tokens, secrets. */
export const REDACT_PATHS = [
  'authorization',
  '*.authorization',
  'headers.authorization',
  '*.headers.authorization',
  'req.headers.authorization',
  'token',
  '*.token',
  'password',
  '*.password',
  'secret',
  '*.secret',
  'secrets',
  '*.secrets',
  'privateKey',
  '*.privateKey',
  'connectionString',
  '*.connectionString',
];

let root: Logger | undefined;

export function createRootLogger(level: string, destination?: pino.DestinationStream): Logger {
  root = pino(
    {
      level,
      base: { service: 'ordo', pid: process.pid },
      messageKey: 'msg',
      timestamp: pino.stdTimeFunctions.isoTime,
      redact: { paths: REDACT_PATHS, censor: '[redacted]' },
      formatters: { level: (label) => ({ level: label }) },
      serializers: { err: pino.stdSerializers.err },
    },
    destination,
  );
  return root;
}

export function rootLogger(): Logger {
  return root ?? createRootLogger(process.env.LOG_LEVEL ?? 'info');
}

/** Bridges Nest's logger to pino, keeping structured context objects as fields. */
export class PinoNestLogger implements LoggerService {
  constructor(private readonly logger: Logger) {}
  // Nest's own `log` lines (module wiring, route mapping) are start-up detail, not operations news.
  log(message: unknown, ...rest: unknown[]) {
    this.write('debug', message, rest);
  }
  error(message: unknown, ...rest: unknown[]) {
    this.write('error', message, rest);
  }
  warn(message: unknown, ...rest: unknown[]) {
    this.write('warn', message, rest);
  }
  debug(message: unknown, ...rest: unknown[]) {
    this.write('debug', message, rest);
  }
  verbose(message: unknown, ...rest: unknown[]) {
    this.write('trace', message, rest);
  }
  fatal(message: unknown, ...rest: unknown[]) {
    this.write('fatal', message, rest);
  }

  private write(level: pino.Level, message: unknown, rest: unknown[]) {
    const context = typeof rest[rest.length - 1] === 'string' ? (rest.pop() as string) : undefined;
    const child = context ? this.logger.child({ context }) : this.logger;
    if (message && typeof message === 'object' && !(message instanceof Error)) {
      const msg = typeof rest[0] === 'string' ? rest[0] : undefined;
      child[level](message, msg);
    } else if (message instanceof Error) {
      child[level]({ err: message }, message.message);
    } else {
      child[level](String(message));
    }
  }
}
