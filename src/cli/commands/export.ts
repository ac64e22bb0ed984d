import fs from 'node:fs';
import path from 'node:path';
import { once } from 'node:events';
import { canonicalJson } from '../../core/json/canonical-json';
import { JWS_FILE, KEY_FILE, MANIFEST_FILE, NDJSON_FILE } from '../../modules/export/export-format';
import { verifyExport, verifyExportFile, type VerifyResult } from '../../modules/export/export-verify';
import { flag, parseFlags, positionals, UsageError, type CliIo, type Command } from '../command';
import type * as ContextExports from '../context';
import type * as ExportModuleExports from '../../modules/export/export.module';
import type * as ExportServiceExports from '../../modules/export/export.service';

const help = `Usage:
  ordo export --out DIR [--tenant T] [--from ISO] [--to ISO] [--dagId D]
  ordo export verify DIR [--key FILE]
  ordo export verify --file FILE --key FILE

export writes a tenant's runs started in [from, to) (all of them by default) as an audit export:
  DIR/export.ndjson          runs, events, steps, attempts, logs, metrics and spans, one record a
                             line, sorted by (startedUtc, dagId, runId), then within a run by sequence
  DIR/manifest.json          tenant, range, counts per record type, SHA-256 of export.ndjson,
                             every run's event hash-chain head
  DIR/manifest.jws           the manifest signed by the instance key (JWS compact, EdDSA, kid)
  DIR/instance-key.jwk.json  the instance's public key, for convenience: auditors should pin the
                             key they trust out of band and pass it with --key
The tenant defaults to ORDO_BOOTSTRAP_TENANT. The same data exports byte-identically.

verify checks an export offline: the signature, the manifest, every line, every run's hash chain
(an operator audit export: every entry's hash and the log's chain), the counts and the SHA-256.
On a changed byte it names the first bad line and exits 1.
  DIR          a directory written by \`ordo export --out\`; the key defaults to
               DIR/instance-key.jwk.json
  --file FILE  the body of GET /api/v1/export or GET /api/v1/admin/audit/export saved as is (its
               last line is the signed manifest)
  --key FILE   the pinned key: a public JWK, or a JWK set as \`ordo keys export --public\` prints;
               the key whose thumbprint is the signature's kid is used (required with --file)`;

export const command: Command = {
  help,
  async run(args, io) {
    if (args[0] === 'verify') return verify(args.slice(1), io);
    const p = parseFlags(
      args,
      {
        out: { type: 'string' },
        tenant: { type: 'string' },
        from: { type: 'string' },
        to: { type: 'string' },
        dagId: { type: 'string' },
      },
      help,
      io,
    );
    if (!p) return;
    positionals(p.positionals, [], help);
    const out = flag(p.values, 'out');
    if (!out) throw new UsageError('--out DIR is required', help);
    /* eslint-disable @typescript-eslint/no-require-imports */
    const { withContext } = require('../context') as typeof ContextExports;
    const { ExportModule } = require('../../modules/export/export.module') as typeof ExportModuleExports;
    const { ExportService, parseRange } = require('../../modules/export/export.service') as typeof ExportServiceExports;
    /* eslint-enable @typescript-eslint/no-require-imports */
    const range = parseRange({
      from: flag(p.values, 'from'),
      to: flag(p.values, 'to'),
      dagId: flag(p.values, 'dagId'),
    });
    await withContext(io, [ExportModule], async (ctx) => {
      const tenant = flag(p.values, 'tenant') ?? ctx.config.ORDO_BOOTSTRAP_TENANT;
      fs.mkdirSync(out, { recursive: true });
      const file = fs.createWriteStream(path.join(out, NDJSON_FILE));
      const lines = ctx.get(ExportService).lines(tenant, range);
      let r = await lines.next();
      while (!r.done) {
        if (!file.write(r.value)) await once(file, 'drain');
        r = await lines.next();
      }
      file.end();
      await once(file, 'finish');
      const signed = r.value;
      fs.writeFileSync(
        path.join(out, MANIFEST_FILE),
        `${JSON.stringify(JSON.parse(canonicalJson(signed.manifest)), null, 2)}\n`,
      );
      fs.writeFileSync(path.join(out, JWS_FILE), `${signed.jws}\n`);
      fs.writeFileSync(path.join(out, KEY_FILE), `${JSON.stringify(signed.publicJwk, null, 2)}\n`);
      const m = signed.manifest;
      io.out(`${out}\n`);
      io.err(
        `ordo: exported tenant ${tenant}: ${m.lines} lines (${Object.entries(m.counts)
          .map(([t, n]) => `${t} ${n}`)
          .join(', ')}), sha256 ${m.sha256}, signed by key ${signed.kid}\n`,
      );
    });
  },
};

async function verify(args: string[], io: CliIo): Promise<void> {
  const p = parseFlags(args, { key: { type: 'string' }, file: { type: 'string' } }, help, io);
  if (!p) return;
  const file = flag(p.values, 'file');
  const keyFile = flag(p.values, 'key');
  let r: VerifyResult;
  let name: string;
  if (file !== undefined) {
    positionals(p.positionals, [], help);
    if (keyFile === undefined)
      throw new UsageError(
        '--key FILE is required with --file: pin the instance key (`ordo keys export --public` on the instance)',
        help,
      );
    r = await verifyExportFile(file, { keyFile });
    name = file;
  } else {
    const [dir] = positionals(p.positionals, ['DIR'], help);
    r = await verifyExport(dir, { keyFile });
    name = NDJSON_FILE;
  }
  if (!r.ok) {
    const where = r.problem?.line !== undefined ? `${name} line ${r.problem.line}: ` : '';
    throw new Error(`verification FAILED: ${where}${r.problem?.message ?? 'unknown problem'}`);
  }
  const counts = Object.entries(r.counts ?? {})
    .map(([t, n]) => `${t} ${n}`)
    .join(', ');
  io.out(`OK: ${r.lines} lines (${counts}), signed by key ${r.kid}\n`);
}
