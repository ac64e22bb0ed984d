import path from 'node:path';
import { z } from 'zod';
import { parsePrivateAllowList } from '../net/ip-range';

export const ROLES = ['api', 'scheduler', 'worker'] as const;
export type Role = (typeof ROLES)[number];

const bool = z
  .enum(['true', 'false', '1', '0', 'yes', 'no'])
  .transform((v) => v === 'true' || v === '1' || v === 'yes');

const postgresUrl = z
  .string()
  .regex(/^postgres(ql)?:\/\//, 'must be a postgres:// or postgresql:// URL')
  .optional();

/** Every environment variable Ordo reads, validated once at start. */
export const envSchema = z.object({
  HOST: z.string().min(1).default('127.0.0.1'),
  PORT: z.coerce.number().int().min(0).max(65535).default(8080),
  ORDO_ROLES: z
    .string()
    .default('api,scheduler,worker')
    .transform((v, ctx) => {
      const roles = [
        ...new Set(
          v
            .split(',')
            .map((r) => r.trim())
            .filter(Boolean),
        ),
      ];
      for (const r of roles) {
        if (!(ROLES as readonly string[]).includes(r)) {
          ctx.addIssue({
            code: 'custom',
            message: `unknown role "${r}" (expected a comma list of api, scheduler, worker)`,
          });
          return z.NEVER;
        }
      }
      if (roles.length === 0) {
        ctx.addIssue({ code: 'custom', message: 'names no role' });
        return z.NEVER;
      }
      return roles as Role[];
    }),
  ORDO_HOME: z.string().min(1).default('.ordo'),
  DATABASE_URL: postgresUrl,
  ORDO_APP_DATABASE_URL: postgresUrl,
  ORDO_SYSTEM_DATABASE_URL: postgresUrl,
  ORDO_EMBEDDED_PG_PORT: z.coerce.number().int().min(1024).max(65535).default(54329),
  ORDO_DB_POOL_SIZE: z.coerce.number().int().min(2).max(200).default(20),
  ORDO_BODY_LIMIT_BYTES: z.coerce
    .number()
    .int()
    .min(1024)
    .max(512 * 1024 * 1024)
    .default(1024 * 1024),
  ORDO_TOKEN_TTL_SECONDS: z.coerce
    .number()
    .int()
    .min(60)
    .max(10 * 365 * 24 * 3600)
    .default(30 * 24 * 3600),
  ORDO_ISSUER: z.string().min(1).default('ordo'),
  ORDO_SIGNING_KEYS_DIR: z.string().min(1).optional(),
  ORDO_BOOTSTRAP_TENANT: z
    .string()
    .regex(/^[a-z0-9][a-z0-9-]{0,62}$/, 'must be a tenant id: lowercase letters, digits and dashes')
    .default('default'),
  ORDO_WORKER_CONCURRENCY: z.coerce.number().int().min(1).max(1024).default(16),
  ORDO_WORKER_CHAIN_MS: z.coerce.number().int().min(0).max(1_000).default(20),
  ORDO_LEASE_TTL_MS: z.coerce.number().int().min(500).max(3_600_000).default(30_000),
  ORDO_REAPER_INTERVAL_MS: z.coerce.number().int().min(100).max(3_600_000).default(5_000),
  ORDO_TENANT_MAX_IN_FLIGHT: z.coerce.number().int().min(1).max(100_000).default(64),
  ORDO_TENANT_SHARED_IN_FLIGHT: z.coerce.number().int().min(0).max(100_000).default(8),
  ORDO_TENANT_SHARED_WINDOW_MS: z.coerce.number().int().min(100).max(3_600_000).default(30_000),
  ORDO_CLI_SANDBOX_REQUIRED: bool.default(true),
  // Sandboxes take 32 uids per process id above the base (pid < 2^22): the last stays below 2^31.
  ORDO_SANDBOX_UID_BASE: z.coerce
    .number()
    .int()
    .min(65_536)
    .max(2 ** 31 - 1 - 2 ** 22 * 32)
    .default(0x7000_0000),
  ORDO_SCRIPT_SANDBOX_PROCESSES: z.coerce.number().int().min(1).max(64).optional(),
  ORDO_EGRESS_ALLOW_PRIVATE: z
    .string()
    .default('')
    .transform((v, ctx) => {
      const ranges = v
        .split(',')
        .map((r) => r.trim())
        .filter(Boolean);
      try {
        parsePrivateAllowList(ranges);
      } catch (e) {
        ctx.addIssue({ code: 'custom', message: (e as Error).message });
        return z.NEVER;
      }
      return ranges;
    }),
  REDIS_URL: z
    .string()
    .regex(/^rediss?:\/\//, 'must be a redis:// URL')
    .optional(),
  OTEL_EXPORTER_OTLP_ENDPOINT: z.string().url().optional(),
  LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
});

export type Env = z.infer<typeof envSchema>;

export interface OrdoConfig extends Env {
  /** Absolute path of ORDO_HOME. */
  home: string;
}

export class ConfigError extends Error {
  constructor(readonly issues: string[]) {
    super(`invalid environment:\n${issues.map((i) => `  - ${i}`).join('\n')}`);
    this.name = 'ConfigError';
  }
}

/** Parses and validates the environment; throws a ConfigError naming every bad variable. */
export function loadConfig(env: NodeJS.ProcessEnv = process.env): OrdoConfig {
  const cleaned: Record<string, string> = {};
  for (const key of Object.keys(envSchema.shape)) {
    const v = env[key];
    if (v !== undefined && v !== '') cleaned[key] = v;
  }
  const parsed = envSchema.safeParse(cleaned);
  if (!parsed.success) {
    throw new ConfigError(parsed.error.issues.map((i) => `${i.path.join('.') || 'environment'}: ${i.message}`));
  }
  return { ...parsed.data, home: path.resolve(parsed.data.ORDO_HOME) };
}
