import './node-version';
import 'reflect-metadata';
import fs from 'node:fs';
import { ConfigError, loadConfig } from './core/config/config';
import { createRootLogger } from './core/logging/logger';
import { startOrdo } from './ordo';

async function main(): Promise<void> {
  let config;
  try {
    config = loadConfig();
  } catch (e) {
    if (e instanceof ConfigError) {
      process.stderr.write(`ordo: ${e.message}\n`);
      process.exit(2);
    }
    throw e;
  }
  const log = createRootLogger(config.LOG_LEVEL);
  const ordo = await startOrdo(config, log);
  const out = process.stdout;
  out.write(`\nOrdo is running (roles: ${config.ORDO_ROLES.join(', ')})\n`);
  out.write(`  API:      ${ordo.url}/api/v1   (OpenAPI: ${ordo.url}/api/v1/openapi.json)\n`);
  if (config.ORDO_ROLES.includes('api')) out.write(`  Console:  ${ordo.url}/   (sign in with a token)\n`);
  out.write(`  Database: ${ordo.embedded ? `embedded PostgreSQL, data in ${config.home}/pg` : 'DATABASE_URL'}\n`);
  if (ordo.sandbox)
    out.write(
      ordo.sandbox.ok
        ? '  Sandbox:  bubblewrap (cli and script steps run unprivileged, with no instance files in view)\n'
        : `  Sandbox:  UNAVAILABLE, ${config.ORDO_CLI_SANDBOX_REQUIRED ? 'cli steps fail with SANDBOX_UNAVAILABLE' : 'cli steps run UNSANDBOXED'}: ${ordo.sandbox.reason}\n`,
    );
  if (ordo.firstStart?.created) {
    const f = ordo.firstStart;
    out.write(
      `\nFirst start: created tenant "${f.tenantId}". These tokens are shown once (also saved, mode 0600, in ${f.file}):\n`,
    );
    out.write(`  Tenant admin token (orchestrator:admin, expires ${expiryOf(f.adminToken)}):\n    ${f.adminToken}\n`);
    out.write(
      `  Platform operator token (platform:admin, expires ${expiryOf(f.platformToken)}):\n    ${f.platformToken}\n`,
    );
    out.write(
      `These two live 10 years, unlike tokens minted later (ORDO_TOKEN_TTL_SECONDS: ${lifetime(config.ORDO_TOKEN_TTL_SECONDS)}): they are how you\n` +
        `first reach this instance, so they do not lapse before you have minted your own; then revoke them (npx ordo tokens revoke).\n`,
    );
    out.write(
      `Whoever can read ${f.file} owns this instance: keep the tokens in a secret store, then delete it (rm ${f.file}).\n`,
    );
    out.write(
      `\nTry it:\n  curl -H "Authorization: Bearer ${f.adminToken}" -H "X-Tenant-Id: ${f.tenantId}" ${ordo.url}/api/v1/tokens\n`,
    );
  } else if (ordo.firstStart && fs.existsSync(ordo.firstStart.file)) {
    out.write(
      `  Auth:     tokens from the first start are in ${ordo.firstStart.file}; mint more with \`npx ordo tokens create\`\n`,
    );
  } else if (ordo.firstStart) {
    // Tenants existed before this home's first start (another home, or the CLI): no secret was minted here.
    out.write(
      '  Auth:     mint tokens with `npx ordo tokens create --platform` or `npx ordo tokens create --tenant <id> --scopes admin`\n',
    );
  }
  out.write('\n');

  let stopping = false;
  const stop = (signal: string) => {
    if (stopping) return;
    stopping = true;
    log.info({ signal }, 'shutting down');
    const force = setTimeout(() => process.exit(1), 10_000);
    force.unref();
    ordo.close().then(
      () => process.exit(0),
      (e: unknown) => {
        log.error({ err: e }, 'shutdown failed');
        process.exit(1);
      },
    );
  };
  process.on('SIGTERM', () => stop('SIGTERM'));
  process.on('SIGINT', () => stop('SIGINT'));
  process.on('SIGHUP', () => stop('SIGHUP'));
}

function lifetime(seconds: number): string {
  return seconds % 86400 === 0 ? `${seconds / 86400} days` : `${seconds} s`;
}

/** The expiry (UTC date) of a token minted here: its `exp` claim, read without verifying. */
function expiryOf(token: string): string {
  const payload = JSON.parse(Buffer.from(token.split('.')[1], 'base64url').toString('utf8')) as { exp: number };
  return new Date(payload.exp * 1000).toISOString().slice(0, 10);
}

main().catch((e: unknown) => {
  process.stderr.write(`ordo: failed to start: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`);
  process.exit(1);
});
