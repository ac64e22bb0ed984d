import fs from 'node:fs';
import path from 'node:path';
import { KEY_FILE, SigningKeys, signingKeysDir } from '../../modules/auth/signing-keys';
import { flag, parseFlags, positionals, table, UsageError, type Command } from '../command';
import { cliConfig } from '../config';

const help = `Usage:
  ordo keys rotate                  add a new Ed25519 signing key and make it the active one
  ordo keys list [--json]           list the signing keys (kid, created, active; --json adds each public JWK)
  ordo keys export --public [--kid <kid>]
                                    print the public keys as a JWK set {"keys": [...]}, no private part

Keys live in a 0600 file under ORDO_SIGNING_KEYS_DIR (default <ORDO_HOME>/keys). After a rotation,
tokens signed by older keys keep verifying until they expire; running processes pick up the new
key when they first see a token signed by it, and sign with it after a restart.

Auditors pin the instance key out of band: save \`ordo keys export --public\` to a file once, then
verify exports against it with \`ordo export verify --file export.ndjson --key <that file>\`.`;

export const command: Command = {
  help,
  async run(args, io) {
    const [sub, ...rest] = args;
    const config = () => cliConfig(io);
    switch (sub) {
      case 'rotate': {
        const p = parseFlags(rest, {}, help, io);
        if (!p) return;
        positionals(p.positionals, [], help);
        const dir = signingKeysDir(config());
        const exists = fs.existsSync(path.join(dir, KEY_FILE));
        const keys = await SigningKeys.open(dir, { create: true });
        const kid = exists ? await keys.rotate() : keys.active.kid;
        io.out(`${kid}\n`);
        io.err(`ordo: active signing key is now ${kid} (${keys.list().length} key(s) in ${dir})\n`);
        return;
      }
      case 'list': {
        const p = parseFlags(rest, { json: { type: 'boolean' } }, help, io);
        if (!p) return;
        positionals(p.positionals, [], help);
        const keys = await SigningKeys.open(signingKeysDir(config()), { create: false });
        const all = keys.list();
        if (p.values.json) {
          const jwks = new Map(keys.publicJwks().keys.map((k) => [k.kid, k]));
          io.out(
            `${JSON.stringify(
              all.map((k) => ({ ...k, publicJwk: jwks.get(k.kid) })),
              null,
              2,
            )}\n`,
          );
        } else
          io.out(table([['KID', 'CREATED', 'ACTIVE'], ...all.map((k) => [k.kid, k.createdAt, k.active ? 'yes' : ''])]));
        return;
      }
      case 'export': {
        const p = parseFlags(rest, { public: { type: 'boolean' }, kid: { type: 'string' } }, help, io);
        if (!p) return;
        positionals(p.positionals, [], help);
        if (!p.values.public)
          throw new UsageError('only --public is exported: private keys never leave ORDO_SIGNING_KEYS_DIR', help);
        const keys = await SigningKeys.open(signingKeysDir(config()), { create: false });
        const kid = flag(p.values, 'kid');
        const set = keys.publicJwks().keys.filter((k) => kid === undefined || k.kid === kid);
        if (set.length === 0) throw new Error(`no signing key with kid ${kid}`);
        io.out(
          `${JSON.stringify({ keys: set.map(({ kty, crv, x, kid: k, alg, use }) => ({ kty, crv, x, kid: k, alg, use })) }, null, 2)}\n`,
        );
        return;
      }
      case '--help':
      case '-h':
        io.out(`${help}\n`);
        return;
      case undefined:
        throw new UsageError('missing subcommand (rotate, list, export)', help);
      default:
        throw new UsageError(`unknown subcommand "${sub}"`, help);
    }
  },
};
