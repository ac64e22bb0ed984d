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

/**
 * Every environment variable Ordo reads, validated once at start. This module is the only reader
 * of the environment in `src/` and `plugins/` (config.spec.ts holds it to that): code gets its
 * settings from the parsed configuration (ORDO_CONFIG in Nest, or a parameter).
 */
export const envSchema = z.object({
  // HTTP listen address.
  HOST: z.string().min(1).default('127.0.0.1'),
  // HTTP listen port (0 picks a free one).
  PORT: z.coerce.number().int().min(0).max(65535).default(8080),
  // Comma list of the roles this process runs.
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
  // The instance's directory: embedded PostgreSQL data, signing keys, first-start credentials.
  ORDO_HOME: z.string().min(1).default('.ordo'),
  // Owner connection (migrations, roles); unset: the embedded PostgreSQL under ORDO_HOME.
  DATABASE_URL: postgresUrl,
  // Connection of the request role (RLS-bound); derived from DATABASE_URL when unset.
  ORDO_APP_DATABASE_URL: postgresUrl,
  // Connection of the system role (cross-tenant work); derived from DATABASE_URL when unset.
  ORDO_SYSTEM_DATABASE_URL: postgresUrl,
  // Port of the embedded PostgreSQL, chosen when a home is set up.
  ORDO_EMBEDDED_PG_PORT: z.coerce.number().int().min(1024).max(65535).default(54329),
  // Connections per process, split between the app and system roles.
  ORDO_DB_POOL_SIZE: z.coerce.number().int().min(2).max(200).default(20),
  // A transaction-mode pooler (PgBouncer) in front of the same database, as postgres://host:port/dbname:
  // the app and system pools connect through it with their roles' credentials; listeners, the job
  // runner and migrations stay on the direct URLs above (docs/operations.md, "PgBouncer").
  ORDO_POOLER_DATABASE_URL: postgresUrl.refine((v) => v === undefined || !/^[^/]*\/\/[^/]*@/.test(v), {
    message: "must not carry a user or password: each pool logs in with its role's credentials",
  }),
  // Named (parse-once) prepared statements on the pools; default on, off with ORDO_POOLER_DATABASE_URL
  // (PgBouncer before 1.21 cannot follow them between server connections).
  ORDO_DB_PREPARED_STATEMENTS: bool.optional(),
  // statement_timeout of the app and system roles' sessions (set by the migration; 0: none).
  ORDO_DB_STATEMENT_TIMEOUT_MS: z.coerce.number().int().min(0).max(86_400_000).default(120_000),
  // idle_in_transaction_session_timeout of the app and system roles' sessions (set by the migration; 0: none).
  ORDO_DB_IDLE_IN_TRANSACTION_TIMEOUT_MS: z.coerce.number().int().min(0).max(86_400_000).default(30_000),
  // Largest request body (413 above).
  ORDO_BODY_LIMIT_BYTES: z.coerce
    .number()
    .int()
    .min(1024)
    .max(512 * 1024 * 1024)
    .default(1024 * 1024),
  // Default lifetime of minted tokens.
  ORDO_TOKEN_TTL_SECONDS: z.coerce
    .number()
    .int()
    .min(60)
    .max(10 * 365 * 24 * 3600)
    .default(30 * 24 * 3600),
  // `iss` of minted tokens.
  ORDO_ISSUER: z.string().min(1).default('ordo'),
  // Directory of the instance's signing keys (default: ORDO_HOME/keys); replicas share it.
  ORDO_SIGNING_KEYS_DIR: z.string().min(1).optional(),
  // Id of the tenant created on the first start.
  ORDO_BOOTSTRAP_TENANT: z
    .string()
    .regex(/^[a-z0-9][a-z0-9-]{0,62}$/, 'must be a tenant id: lowercase letters, digits and dashes')
    .default('default'),
  // Steps a worker process runs at once.
  ORDO_WORKER_CONCURRENCY: z.coerce.number().int().min(1).max(1024).default(16),
  // How long a worker may hold a succeeded step's result while it runs a chain after it (0: no chains).
  ORDO_WORKER_CHAIN_MS: z.coerce.number().int().min(0).max(1_000).default(20),
  // How deep child runs of `dag` steps may nest (a run's child is depth 1); deeper, the step fails (SUBDAG_DEPTH_EXCEEDED).
  ORDO_SUBDAG_MAX_DEPTH: z.coerce.number().int().min(1).max(100).default(5),
  // An external worker not heard from (heartbeat, pull, result, a message or pong on its channel) for this long is offline and its tasks go elsewhere.
  // (At least 2 s: liveness is recorded in batches once a second.)
  ORDO_EXTERNAL_WORKER_TTL_MS: z.coerce.number().int().min(2_000).max(3_600_000).default(30_000),
  // How long a task pull (GET …/tasks/next) waits for a task before it answers 204.
  ORDO_EXTERNAL_WORKER_LONG_POLL_MS: z.coerce.number().int().min(100).max(120_000).default(25_000),
  // A worker name whose reputation score (0..1) falls below this gets no task until an operator resets it.
  ORDO_EXTERNAL_WORKER_REPUTATION_FLOOR: z.coerce.number().min(0).max(1).default(0.2),
  // The half-life of a worker's past outcomes in its reputation.
  ORDO_EXTERNAL_WORKER_REPUTATION_HALF_LIFE_MS: z.coerce.number().int().min(1_000).default(3_600_000),
  // The largest outputs (canonical JSON) an external worker may post for a task.
  ORDO_EXTERNAL_WORKER_MAX_OUTPUT_BYTES: z.coerce
    .number()
    .int()
    .min(1_024)
    .max(64 * 1024 * 1024)
    .default(1024 * 1024),
  // How often the scheduler checks external workers' TTLs and their tasks' deadlines.
  ORDO_EXTERNAL_WORKER_SWEEP_MS: z.coerce.number().int().min(100).max(60_000).default(1_000),
  // Lease of a claimed step; a worker heartbeats well within it.
  ORDO_LEASE_TTL_MS: z.coerce.number().int().min(500).max(3_600_000).default(30_000),
  // How often the scheduler looks for expired leases.
  ORDO_REAPER_INTERVAL_MS: z.coerce.number().int().min(100).max(3_600_000).default(5_000),
  // Retention of finished runs, in days, for tenants whose plan sets no retentionDays (unset: kept
  // forever). docs/retention.md.
  ORDO_RETENTION_DAYS: z.coerce.number().int().min(1).max(36_500).optional(),
  // true: retention removes only runs an export read after they finished.
  ORDO_RETENTION_REQUIRES_EXPORT: bool.default(false),
  // How often the scheduler role makes partitions ahead and applies retention.
  ORDO_RETENTION_INTERVAL_MS: z.coerce.number().int().min(1_000).max(86_400_000).default(3_600_000),
  // Per-tenant cap on steps in flight across workers.
  ORDO_TENANT_MAX_IN_FLIGHT: z.coerce.number().int().min(1).max(100_000).default(64),
  // The per-tenant cap while tenants share the engine (0: the full cap always).
  ORDO_TENANT_SHARED_IN_FLIGHT: z.coerce.number().int().min(0).max(100_000).default(8),
  // How long after another tenant's last step a worker still counts the tenants as sharing.
  ORDO_TENANT_SHARED_WINDOW_MS: z.coerce.number().int().min(100).max(3_600_000).default(30_000),
  // false: `cli` steps run without the sandbox when it cannot be built (with a warning).
  ORDO_CLI_SANDBOX_REQUIRED: bool.default(true),
  // Run as root, sandboxes run as host uids from this base: base + pid × 32 + slot.
  // Sandboxes take 32 uids per process id above the base (pid < 2^22): the last stays below 2^31.
  ORDO_SANDBOX_UID_BASE: z.coerce
    .number()
    .int()
    .min(65_536)
    .max(2 ** 31 - 1 - 2 ** 22 * 32)
    .default(0x7000_0000),
  // Script sandbox processes per Ordo process (default: the CPU count, clamped to 2–8).
  ORDO_SCRIPT_SANDBOX_PROCESSES: z.coerce.number().int().min(1).max(64).optional(),
  // Private and special ranges a step's egress entry naming an IP literal may reach; empty: none.
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
  // Optional: cross-replica stream fan-out and the API rate limiter's counters in Redis (unset: in PostgreSQL).
  REDIS_URL: z
    .string()
    .regex(/^rediss?:\/\//, 'must be a redis:// URL')
    .optional(),
  // Prefix of the rate limiter's keys in Redis (instances sharing one Redis need different ones).
  ORDO_RATE_LIMIT_KEY_PREFIX: z
    .string()
    .regex(/^[A-Za-z0-9:._-]{1,64}$/, 'must be 1-64 letters, digits, colons, dots, dashes or underscores')
    .default('ordo:rl'),
  // Tenants named in the per-tenant queue and limit metrics (the rest are summed as `other`).
  ORDO_METRICS_TOP_TENANTS: z.coerce.number().int().min(0).max(1_000).default(20),
  // Optional: OTLP/HTTP trace export to `<endpoint>/v1/traces`.
  OTEL_EXPORTER_OTLP_ENDPOINT: z.string().url().optional(),
  // pino level of the process's logs.
  LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
  // The `ordo` command prints the stack of an unexpected error.
  ORDO_DEBUG: bool.default(false),
  // Benchmarks: a worker sums its time per engine phase and prints it at shutdown.
  ORDO_ENGINE_PROFILE: bool.default(false),
  // Test-only (unset in production): the fraction (0–1) of successful COMMITs, and of the engine's
  // one-statement hops, that the caller sees as a lost connection (see core/database/database.ts).
  ORDO_CHAOS_COMMIT_ERROR_RATE: z.coerce.number().min(0).max(1).default(0),
  // Test-only (unset in production): the scheduler's clock starts at this instant (ISO 8601)
  // instead of following the system clock, so several processes share one virtual time.
  ORDO_TEST_CLOCK_START: z.iso.datetime({ offset: true }).optional(),
  // Test-only: the real instant (epoch ms) at which the test clock reads ORDO_TEST_CLOCK_START
  // (default: process start).
  ORDO_TEST_CLOCK_ANCHOR: z.coerce.number().int().positive().optional(),
  // Test-only: how many times faster than real time the test clock runs (default 1).
  ORDO_TEST_CLOCK_SPEED: z.coerce.number().positive().max(10_000).optional(),
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

/**
 * The API connection of the CLI's API verbs (`ordo dags`, `ordo runs`), from the environment when
 * no flag gives it: the API's address or comma-separated addresses, the token, and its tenant.
 * Not part of a process's configuration: only these verbs read them.
 */
export interface ClientEnvironment {
  url?: string;
  token?: string;
  tenant?: string;
}

export function clientEnvironment(env: Record<string, string | undefined>): ClientEnvironment {
  const pick = (v: string | undefined) => (v === undefined || v === '' ? undefined : v);
  return { url: pick(env.ORDO_URL), token: pick(env.ORDO_TOKEN), tenant: pick(env.ORDO_TENANT) };
}
