import type { LoggerService } from '@nestjs/common';
import { trace } from '@opentelemetry/api';
import pino, { type Logger } from 'pino';
import { currentLogContext } from './log-context';

// Key names whose values never reach a log line, at the top level and up to two levels down.
const SECRET_KEYS = [
  'authorization',
  'Authorization',
  'token',
  'password',
  'secret',
  'secrets',
  'privateKey',
  'privateJwk',
  'connectionString',
  'cookie',
  'apiKey',
  'accessToken',
  'access_token',
  'refreshToken',
  'clientSecret',
  'adminToken',
  'platformToken',
];
const HEADER_KEYS = ['authorization', 'Authorization', 'cookie', '["set-cookie"]', '["x-api-key"]'];

/** Paths whose values never reach a log line: credentials, tokens, secrets. */
export const REDACT_PATHS = [
  ...SECRET_KEYS.flatMap((k) => [k, `*.${k}`, `*.*.${k}`]),
  ...HEADER_KEYS.flatMap((k) => {
    const seg = k.startsWith('[') ? k : `.${k}`;
    return [`headers${seg}`, `*.headers${seg}`, `*.*.headers${seg}`];
  }),
];

// Credentials that slip into free text: bearer tokens and anything shaped like a JWT.
const BEARER = /\bBearer\s+[A-Za-z0-9._~+/=-]+/g;
const JWT = /\beyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]*/g;

/** Replaces bearer tokens and JWTs found in a free-text log message. */
export function scrubText(text: string): string {
  return text.replace(BEARER, 'Bearer [redacted]').replace(JWT, '[redacted]');
}

/**
 * Fields from the current context: the log context (tenant, dagId, runId, stepId, trace_id) and,
 * when no trace_id is set there, the active span's trace id.
 */
function contextFields(): Record<string, string> {
  const fields: Record<string, string> = { ...currentLogContext() };
  if (!fields.trace_id) {
    const span = trace.getActiveSpan();
    if (span) fields.trace_id = span.spanContext().traceId;
  }
  return fields;
}

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
      mixin: contextFields,
      hooks: {
        logMethod(args, method) {
          const scrubbed = args.map((a: unknown) => (typeof a === 'string' ? scrubText(a) : a)) as typeof args;
          method.apply(this, scrubbed);
        },
      },
    },
    destination,
  );
  return root;
}

/**
 * The process's root logger: the one its entry point created from LOG_LEVEL (main.ts, the CLI), or
 * one at info where no entry point did (unit tests).
 */
export function rootLogger(): Logger {
  return root ?? createRootLogger('info');
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
