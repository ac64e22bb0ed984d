import fs from 'node:fs/promises';
import {
  exampleKeyKids,
  keygen,
  readPrivateJwk,
  readPublicJwk,
  signBundle,
  verifyBundleOffline,
} from '../../modules/bundles/bundle-offline';
import { packBundle } from '../../modules/bundles/bundle-pack';
import { DomainError } from '../../core/errors/domain-error';
import { kidSchema } from '../../modules/trust/detached-jws';
import { flag, parseFlags, positionals, UsageError, type CliIo, type Command, type ParsedFlags } from '../command';
import { parseTenantId } from './tenants';
import type * as ContextExports from '../context';
import type * as BundlesModuleExports from '../../modules/bundles/bundles.module';
import type * as BundlesServiceExports from '../../modules/bundles/bundles.service';
import type * as TrustModuleExports from '../../modules/trust/trust.module';
import type * as TrustServiceExports from '../../modules/trust/trust.service';

const help = `Usage:
  ordo bundle keygen --out <dir> [--kid <kid> [--tenant <id>]]
                                                    new Ed25519 key pair: <kid>.private.jwk (0600), <kid>.public.jwk
  ordo bundle pack <dir> --out <file.tar.gz> [--created <iso>]
                                                    build a bundle from <dir>/bundle.json and the files it lists
  ordo bundle sign <file.tar.gz> --key <private.jwk> [--out <file.sig>]
                                                    write the detached signature (default <file.tar.gz>.sig)
  ordo bundle verify <file.tar.gz> --pubkey <public.jwk> [--sig <file.sig>]
                                                    offline: signature, every path, size and SHA-256
  ordo bundle import <file.tar.gz> --tenant <id> [--sig <file.sig>]
                                                    import into a tenant (same checks and trust store as the API)

bundle.json: {"name", "version" (semver), "owner", "dags": [paths], "scripts": [paths], "files": [paths]}.
Packing is deterministic: same sources and --created (or SOURCE_DATE_EPOCH) give the same bytes.
The kid defaults to the key's RFC 7638 thumbprint. A tenant trusts one key per kid: a new key needs
a kid that is not trusted yet: keygen refuses the shipped example key's kid and, given --tenant
(checked in the database Ordo uses), a kid that tenant already trusts or has revoked. Import works
against the database Ordo uses.`;

export const command: Command = {
  help,
  async run(args, io) {
    const [sub, ...rest] = args;
    switch (sub) {
      case 'keygen':
        return keygenCmd(rest, io);
      case 'pack':
        return packCmd(rest, io);
      case 'sign':
        return signCmd(rest, io);
      case 'verify':
        return verifyCmd(rest, io);
      case 'import':
        return importCmd(rest, io);
      case '--help':
      case '-h':
        io.out(`${help}\n`);
        return;
      case undefined:
        throw new UsageError('missing subcommand (keygen, pack, sign, verify, import)', help);
      default:
        throw new UsageError(`unknown subcommand "${sub}"`, help);
    }
  },
};

function required(values: ParsedFlags['values'], name: string): string {
  const v = flag(values, name);
  if (v === undefined) throw new UsageError(`missing --${name}`, help);
  return v;
}

async function keygenCmd(args: string[], io: CliIo): Promise<void> {
  const p = parseFlags(
    args,
    { out: { type: 'string' }, kid: { type: 'string' }, tenant: { type: 'string' } },
    help,
    io,
  );
  if (!p) return;
  positionals(p.positionals, [], help);
  const kid = flag(p.values, 'kid');
  const tenant = flag(p.values, 'tenant');
  if (tenant !== undefined && kid === undefined)
    throw new UsageError('--tenant checks a chosen --kid; a key without --kid gets its thumbprint, new anywhere', help);
  if (kid !== undefined && !kidSchema.safeParse(kid).success)
    throw new UsageError(`--kid "${kid}": letters, digits, . _ : and -, at most 128`, help);
  if (kid !== undefined && (await exampleKeyKids()).includes(kid))
    throw new UsageError(
      `--kid ${kid} is the kid of the shipped example key (bundles/example/keys): a tenant that trusts the example key would check your bundles against it and refuse them. Choose another kid, or leave out --kid for the key's thumbprint`,
      help,
    );
  const out = required(p.values, 'out');
  if (tenant !== undefined && kid !== undefined) await refuseTrustedKid(io, parseTenantId(tenant, help), kid);
  const r = await keygen(out, kid);
  io.out(`${r.kid}\n`);
  io.err(`ordo: private key ${r.privateFile} (keep it secret), public key ${r.publicFile}\n`);
}

/** Refuses a kid the tenant's trust store already holds (trusted, expired or revoked: kids are never reused). */
async function refuseTrustedKid(io: CliIo, tenantId: string, kid: string): Promise<void> {
  /* eslint-disable @typescript-eslint/no-require-imports */
  const { withContext } = require('../context') as typeof ContextExports;
  const { TrustModule } = require('../../modules/trust/trust.module') as typeof TrustModuleExports;
  const { TrustService } = require('../../modules/trust/trust.service') as typeof TrustServiceExports;
  /* eslint-enable @typescript-eslint/no-require-imports */
  const existing = await withContext(io, [TrustModule], (ctx) =>
    ctx
      .get(TrustService)
      .getKey(tenantId, kid)
      .catch((e: unknown) => {
        if (e instanceof DomainError && e.status === 404) return undefined;
        throw e;
      }),
  );
  if (existing) {
    const state = existing.revokedAt ? `revoked at ${existing.revokedAt}` : `owner "${existing.owner}"`;
    throw new UsageError(
      `--kid ${kid}: tenant ${tenantId} already has a trust key with this kid (${state}); a new key needs a kid of its own`,
      help,
    );
  }
}

async function packCmd(args: string[], io: CliIo): Promise<void> {
  const p = parseFlags(args, { out: { type: 'string' }, created: { type: 'string' } }, help, io);
  if (!p) return;
  const [dir] = positionals(p.positionals, ['dir'], help);
  const createdFlag = flag(p.values, 'created');
  const created = createdFlag === undefined ? undefined : new Date(createdFlag);
  if (created && Number.isNaN(created.getTime()))
    throw new UsageError(`--created "${createdFlag}" is not a date`, help);
  const out = required(p.values, 'out');
  const packed = await packBundle(dir, { created, env: io.env });
  await fs.writeFile(out, packed.tarball);
  io.out(`${packed.bundleHash}\n`);
  io.err(
    `ordo: packed ${packed.manifest.name}@${packed.manifest.version} (${packed.manifest.files.length} files, ${packed.tarball.length} bytes) into ${out}\n`,
  );
}

async function signCmd(args: string[], io: CliIo): Promise<void> {
  const p = parseFlags(args, { key: { type: 'string' }, out: { type: 'string' } }, help, io);
  if (!p) return;
  const [file] = positionals(p.positionals, ['file.tar.gz'], help);
  const key = await readPrivateJwk(required(p.values, 'key'));
  const { signature, bundle } = await signBundle(await fs.readFile(file), key);
  const out = flag(p.values, 'out') ?? `${file}.sig`;
  await fs.writeFile(out, `${signature}\n`);
  io.out(`${out}\n`);
  io.err(
    `ordo: signed ${bundle.manifest.name}@${bundle.manifest.version} (bundle ${bundle.bundleHash}) with key ${key.kid}\n`,
  );
}

async function verifyCmd(args: string[], io: CliIo): Promise<void> {
  const p = parseFlags(args, { pubkey: { type: 'string' }, sig: { type: 'string' } }, help, io);
  if (!p) return;
  const [file] = positionals(p.positionals, ['file.tar.gz'], help);
  const pub = await readPublicJwk(required(p.values, 'pubkey'));
  const signature = (await fs.readFile(flag(p.values, 'sig') ?? `${file}.sig`, 'utf8')).trim();
  const r = await verifyBundleOffline(await fs.readFile(file), signature, pub);
  io.out(`${r.bundleHash}\n`);
  io.err(
    `ordo: OK ${r.manifest.name}@${r.manifest.version} by ${r.manifest.owner}, key ${r.kid}: signature, ${r.files.size} files and their hashes verified\n`,
  );
}

async function importCmd(args: string[], io: CliIo): Promise<void> {
  const p = parseFlags(args, { tenant: { type: 'string' }, sig: { type: 'string' } }, help, io);
  if (!p) return;
  const [file] = positionals(p.positionals, ['file.tar.gz'], help);
  const tenantId = parseTenantId(required(p.values, 'tenant'), help);
  const archive = await fs.readFile(file);
  const signature = (await fs.readFile(flag(p.values, 'sig') ?? `${file}.sig`, 'utf8')).trim();
  /* eslint-disable @typescript-eslint/no-require-imports */
  const { withContext } = require('../context') as typeof ContextExports;
  const { BundlesModule } = require('../../modules/bundles/bundles.module') as typeof BundlesModuleExports;
  const { BundlesService } = require('../../modules/bundles/bundles.service') as typeof BundlesServiceExports;
  /* eslint-enable @typescript-eslint/no-require-imports */
  const r = await withContext(io, [BundlesModule], (ctx) =>
    ctx.get(BundlesService).import(tenantId, 'cli', archive, signature),
  );
  io.out(`${r.bundleHash}\n`);
  io.err(
    `ordo: ${r.imported ? 'imported' : 'already imported'} ${r.name}@${r.version} into ${tenantId}: ${r.dags.map((d) => `${d.dagId} v${d.version}`).join(', ') || 'no DAGs'}\n`,
  );
}
