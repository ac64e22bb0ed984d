import fs from 'node:fs';
import path from 'node:path';
import { once } from 'node:events';
import { canonicalJson } from '../../core/json/canonical-json';
import { JWS_FILE, KEY_FILE, MANIFEST_FILE, NDJSON_FILE } from '../../modules/export/export-format';
import { verifyExport } from '../../modules/export/export-verify';
import { ExportModule } from '../../modules/export/export.module';
import { ExportService, parseRange } from '../../modules/export/export.service';
import { defineCommand, flag, parseFlags, positionals, UsageError } from '../command';
import { withContext } from '../context';

const help = `Usage:
  ordo export --out DIR [--tenant T] [--from ISO] [--to ISO] [--dagId D]
  ordo export verify DIR [--key FILE]

export writes a tenant's runs started in [from, to) (all of them by default) as an audit export:
  DIR/export.ndjson          runs, events, steps, attempts, logs, metrics and spans, one record a
                             line, sorted by (startedUtc, dagId, runId), then within a run by sequence
  DIR/manifest.json          tenant, range, counts per record type, SHA-256 of export.ndjson,
                             every run's event hash-chain head
  DIR/manifest.jws           the manifest signed by the instance key (JWS compact, EdDSA, kid)
  DIR/instance-key.jwk.json  the instance's public key, for convenience: auditors should pin the
                             key they trust out of band and pass it with --key
The tenant defaults to ORDO_BOOTSTRAP_TENANT. The same data exports byte-identically.

verify checks DIR offline: the signature, the manifest, every line, every run's hash chain, the
counts and the SHA-256. On a changed byte it names the first bad line and exits 1.`;

export const command = defineCommand({
  name: 'export',
  summary: 'Write a signed NDJSON audit export of runs, or verify one offline',
  help,
  async run(args, io) {
    if (args[0] === 'verify') {
      const p = parseFlags(args.slice(1), { key: { type: 'string' } }, help, io);
      if (!p) return;
      const [dir] = positionals(p.positionals, ['DIR'], help);
      const r = await verifyExport(dir, { keyFile: flag(p.values, 'key') });
      if (!r.ok) {
        const where = r.problem?.line !== undefined ? `${NDJSON_FILE} line ${r.problem.line}: ` : '';
        throw new Error(`verification FAILED: ${where}${r.problem?.message ?? 'unknown problem'}`);
      }
      const counts = Object.entries(r.counts ?? {})
        .map(([t, n]) => `${t} ${n}`)
        .join(', ');
      io.out(`OK: ${r.lines} lines (${counts}), signed by key ${r.kid}\n`);
      return;
    }
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
});
