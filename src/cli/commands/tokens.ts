import type { TenantPrincipalT } from '../../core/http/request-context';
import { SCOPES, type TenantScope } from '../../core/http/route-spec';
import { jtiParams, operatorTokenBody } from '../../modules/auth/tokens.dto';
import { flag, parseFlags, positionals, table, UsageError, type CliIo, type Command } from '../command';
import type { CliContext } from '../context';
import { parseTenantId } from './tenants';
import type * as AuthModuleExports from '../../modules/auth/auth.module';
import type * as AuthRepositoryExports from '../../modules/auth/auth.repository';
import type * as TokenServiceExports from '../../modules/auth/token.service';
import type * as TokensServiceExports from '../../modules/auth/tokens.service';
import type * as TenantsModuleExports from '../../modules/tenants/tenants.module';
import type * as TenantsServiceExports from '../../modules/tenants/tenants.service';
import type * as ContextExports from '../context';

const help = `Usage:
  ordo tokens create --tenant <id> --scopes <a,b> [--subject <sub>] [--ttl <duration>] [--description <text>]
  ordo tokens create --platform [--subject <sub>] [--ttl <duration>]
  ordo tokens list --tenant <id> [--json]
  ordo tokens list --platform [--json]
  ordo tokens revoke --tenant <id> <jti>
  ordo tokens revoke --platform <jti>

Scopes: orchestrator:read, orchestrator:write, orchestrator:admin (or read, write, admin).
--platform mints a platform operator token (scope platform:admin: manages tenants).
--ttl takes seconds or a number with s, m, h or d (default ORDO_TOKEN_TTL_SECONDS).
The token is printed once, alone, on stdout (e.g. TOKEN=$(npx ordo tokens create …));
everything else goes to stderr. Revocation holds at once on every replica.`;

const PLATFORM_TTL_DEFAULT = 30 * 24 * 3600;
const CLI_OPERATOR = 'cli';

export const command: Command = {
  help,
  async run(args, io) {
    const [sub, ...rest] = args;
    switch (sub) {
      case 'create':
        return create(rest, io);
      case 'list':
        return list(rest, io);
      case 'revoke':
        return revoke(rest, io);
      case '--help':
      case '-h':
        io.out(`${help}\n`);
        return;
      case undefined:
        throw new UsageError('missing subcommand (create, list, revoke)', help);
      default:
        throw new UsageError(`unknown subcommand "${sub}"`, help);
    }
  },
};

/** The services these subcommands use; they (with Nest and the database) load when one runs. */
function services() {
  /* eslint-disable @typescript-eslint/no-require-imports */
  return {
    ...(require('../../modules/auth/auth.module') as typeof AuthModuleExports),
    ...(require('../../modules/auth/auth.repository') as typeof AuthRepositoryExports),
    ...(require('../../modules/auth/token.service') as typeof TokenServiceExports),
    ...(require('../../modules/auth/tokens.service') as typeof TokensServiceExports),
    ...(require('../../modules/tenants/tenants.module') as typeof TenantsModuleExports),
    ...(require('../../modules/tenants/tenants.service') as typeof TenantsServiceExports),
    ...(require('../context') as typeof ContextExports),
  };
  /* eslint-enable @typescript-eslint/no-require-imports */
}
type Services = ReturnType<typeof services>;

/** Runs `fn` against Ordo's database with the auth (platform tokens) or the tenants module. */
async function withServices<T>(
  io: CliIo,
  module: 'auth' | 'tenants',
  fn: (ctx: CliContext, s: Services) => Promise<T>,
): Promise<T> {
  const s = services();
  return s.withContext(io, [module === 'auth' ? s.AuthModule : s.TenantsModule], (ctx) => fn(ctx, s));
}

async function create(args: string[], io: CliIo): Promise<void> {
  const p = parseFlags(
    args,
    {
      tenant: { type: 'string' },
      platform: { type: 'boolean' },
      scopes: { type: 'string' },
      subject: { type: 'string' },
      ttl: { type: 'string' },
      description: { type: 'string' },
    },
    help,
    io,
  );
  if (!p) return;
  positionals(p.positionals, [], help);
  const ttl = flag(p.values, 'ttl');
  const ttlSeconds = ttl === undefined ? undefined : parseTtl(ttl);
  const tenant = flag(p.values, 'tenant');
  if (p.values.platform) {
    if (tenant !== undefined || flag(p.values, 'scopes') !== undefined) {
      throw new UsageError('--platform takes neither --tenant nor --scopes', help);
    }
    const subject = flag(p.values, 'subject') ?? 'operator';
    const minted = await withServices(io, 'auth', async (ctx, s) => {
      const m = await ctx.get(s.TokenService).mintPlatform(subject, ttlSeconds ?? PLATFORM_TTL_DEFAULT);
      await ctx.get(s.AuthRepository).insertPlatformToken(ctx.database.system, {
        jti: m.jti,
        subject,
        description: flag(p.values, 'description') ?? 'minted with ordo tokens create --platform',
        expiresAt: m.expiresAt,
      });
      return m;
    });
    io.out(`${minted.token}\n`);
    io.err(`ordo: platform token ${minted.jti} for ${subject}, expires ${minted.expiresAt.toISOString()}\n`);
    return;
  }
  if (tenant === undefined) throw new UsageError('missing --tenant <id> (or --platform)', help);
  const scopesFlag = flag(p.values, 'scopes');
  if (scopesFlag === undefined) throw new UsageError('missing --scopes <a,b>', help);
  const body = operatorTokenBody.safeParse({
    scopes: parseScopes(scopesFlag),
    subject: flag(p.values, 'subject'),
    ttlSeconds,
    description: flag(p.values, 'description'),
  });
  if (!body.success) {
    const i = body.error.issues[0];
    throw new UsageError(`${i.path.join('.')}: ${i.message}`, help);
  }
  const tenantId = parseTenantId(tenant, help);
  const minted = await withServices(io, 'tenants', (ctx, s) =>
    ctx.get(s.TenantsService).mintToken(CLI_OPERATOR, tenantId, body.data),
  );
  io.out(`${minted.token}\n`);
  io.err(
    `ordo: token ${minted.jti} for ${minted.subject}@${minted.tenantId} [${minted.scopes.join(' ')}], expires ${minted.expiresAt}\n`,
  );
}

async function list(args: string[], io: CliIo): Promise<void> {
  const p = parseFlags(
    args,
    { tenant: { type: 'string' }, platform: { type: 'boolean' }, json: { type: 'boolean' } },
    help,
    io,
  );
  if (!p) return;
  positionals(p.positionals, [], help);
  if (p.values.platform) {
    if (flag(p.values, 'tenant') !== undefined) throw new UsageError('--platform takes no --tenant', help);
    const rows = await withServices(io, 'auth', (ctx, s) =>
      ctx.get(s.AuthRepository).listPlatformTokens(ctx.database.system),
    );
    const items = rows.map((t) => ({
      jti: t.jti,
      subject: t.subject,
      description: t.description,
      createdAt: t.createdAt.toISOString(),
      expiresAt: t.expiresAt.toISOString(),
      revokedAt: t.revokedAt?.toISOString() ?? null,
    }));
    if (p.values.json) io.out(`${JSON.stringify(items, null, 2)}\n`);
    else {
      io.out(
        table([
          ['JTI', 'SUBJECT', 'CREATED', 'EXPIRES', 'REVOKED'],
          ...items.map((t) => [t.jti, t.subject, t.createdAt, t.expiresAt, t.revokedAt ?? '-']),
        ]),
      );
    }
    return;
  }
  const tenantId = requireTenant(flag(p.values, 'tenant'));
  const items = await withServices(io, 'tenants', async (ctx, s) => {
    const principal = await operatorOf(ctx, s, tenantId);
    const svc = ctx.get(s.TokensService);
    const out = [];
    let pageToken: string | undefined;
    do {
      const page = await svc.list(principal, { limit: 500, pageToken });
      out.push(...page.items);
      pageToken = page.nextPageToken ?? undefined;
    } while (pageToken);
    return out;
  });
  if (p.values.json) {
    io.out(`${JSON.stringify(items, null, 2)}\n`);
    return;
  }
  io.out(
    table([
      ['JTI', 'SUBJECT', 'SCOPES', 'CREATED', 'EXPIRES', 'REVOKED'],
      ...items.map((t) => [t.jti, t.subject, t.scopes.join(','), t.createdAt, t.expiresAt, t.revokedAt ?? '-']),
    ]),
  );
}

async function revoke(args: string[], io: CliIo): Promise<void> {
  const p = parseFlags(args, { tenant: { type: 'string' }, platform: { type: 'boolean' } }, help, io);
  if (!p) return;
  const [jti] = positionals(p.positionals, ['jti'], help);
  if (!jtiParams.safeParse({ jti }).success) throw new UsageError(`"${jti}" is not a token id (a UUID)`, help);
  if (p.values.platform) {
    if (flag(p.values, 'tenant') !== undefined) throw new UsageError('--platform takes no --tenant', help);
    const at = await withServices(io, 'auth', (ctx, s) =>
      ctx.get(s.AuthRepository).revokePlatformToken(ctx.database.system, jti),
    );
    if (!at) throw new Error(`platform token ${jti} not found`);
    io.err(`ordo: platform token ${jti} revoked at ${at.toISOString()}\n`);
    return;
  }
  const tenantId = requireTenant(flag(p.values, 'tenant'));
  const r = await withServices(io, 'tenants', async (ctx, s) =>
    ctx.get(s.TokensService).revoke(await operatorOf(ctx, s, tenantId), jti),
  );
  io.err(`ordo: token ${r.jti} revoked at ${r.revokedAt}\n`);
}

function requireTenant(tenant: string | undefined): string {
  if (tenant === undefined) throw new UsageError('missing --tenant <id>', help);
  return parseTenantId(tenant, help);
}

/** The CLI acts as the tenant's administrator, once the tenant is known to exist. */
async function operatorOf(ctx: CliContext, s: Services, tenantId: string): Promise<TenantPrincipalT> {
  await ctx.get(s.TenantsService).get(tenantId);
  return { kind: 'tenant', tenantId, subject: CLI_OPERATOR, scopes: ['orchestrator:admin'], jti: '' };
}

function parseScopes(v: string): TenantScope[] {
  return v
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean)
    .map((s) => {
      const full = s.includes(':') ? s : `orchestrator:${s}`;
      if (!(SCOPES as readonly string[]).includes(full)) {
        throw new UsageError(`unknown scope "${s}" (expected ${SCOPES.join(', ')})`, help);
      }
      return full as TenantScope;
    });
}

export function parseTtl(v: string): number {
  const m = /^(\d+)([smhd]?)$/.exec(v.trim());
  if (!m) throw new UsageError(`--ttl "${v}" is not a duration (e.g. 3600, 90m, 12h, 30d)`, help);
  const mult = { '': 1, s: 1, m: 60, h: 3600, d: 86400 }[m[2]] ?? 1;
  return Number(m[1]) * mult;
}
