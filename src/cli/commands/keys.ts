import fs from 'node:fs';
import path from 'node:path';
import { KEY_FILE, SigningKeys, signingKeysDir } from '../../modules/auth/signing-keys';
import { defineCommand, parseFlags, positionals, table, UsageError } from '../command';
import { cliConfig } from '../context';

const help = `Usage:
  ordo keys rotate          add a new Ed25519 signing key and make it the active one
  ordo keys list [--json]   list the signing keys (kid, created, active)

Keys live in a 0600 file under ORDO_SIGNING_KEYS_DIR (default <ORDO_HOME>/keys). After a rotation,
tokens signed by older keys keep verifying until they expire; running processes pick up the new
key when they first see a token signed by it, and sign with it after a restart.`;

export const command = defineCommand({
  name: 'keys',
  summary: 'Rotate and list the instance signing keys',
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
        if (p.values.json) io.out(`${JSON.stringify(all, null, 2)}\n`);
        else
          io.out(table([['KID', 'CREATED', 'ACTIVE'], ...all.map((k) => [k.kid, k.createdAt, k.active ? 'yes' : ''])]));
        return;
      }
      case '--help':
      case '-h':
        io.out(`${help}\n`);
        return;
      case undefined:
        throw new UsageError('missing subcommand (rotate, list)', help);
      default:
        throw new UsageError(`unknown subcommand "${sub}"`, help);
    }
  },
});
