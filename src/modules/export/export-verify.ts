import { createHash } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { calculateJwkThumbprint, compactVerify, importJWK, type JWK } from 'jose';
import { canonicalJson } from '../../core/json/canonical-json';
import {
  FORMAT,
  JWS_FILE,
  JWS_TYPE,
  KEY_FILE,
  MANIFEST_FILE,
  NDJSON_FILE,
  RECORD_TYPES,
  eventHash,
  lineHash,
  splitLine,
  type Manifest,
  type RecordType,
} from './export-format';

export interface VerifyResult {
  ok: boolean;
  lines: number;
  counts?: Record<RecordType, number>;
  /** The first problem: the 1-based line of export.ndjson when it is in a line. */
  problem?: { line?: number; message: string };
  kid?: string;
}

// Order of record types inside a run (a run record opens each run).
const RANK: Record<RecordType, number> = { run: 0, event: 1, step: 2, attempt: 3, log: 4, metric: 5, span: 6 };

interface RunState {
  line: number;
  runId: string;
  key: [string, string, string];
  eventCount: number;
  eventHead: string;
  seq: number;
  head: string;
  rank: number;
}

class Problem extends Error {
  constructor(
    message: string,
    readonly line?: number,
  ) {
    super(message);
  }
}

/**
 * Verifies an export directory offline: the manifest's JWS against the pinned public key (kid =
 * its JWK thumbprint), manifest.json against the signed payload, then export.ndjson line by line
 * (export form, line hash chain, record order, every run's event hash chain recomputed and matched
 * with its run record and the manifest's chain heads), and finally counts, line count and SHA-256.
 * Reads the NDJSON as a stream of exact lines: memory does not grow with its size, and a changed
 * byte is named at its line, whitespace, key order and line endings included.
 */
export async function verifyExport(dir: string, opts: { keyFile?: string } = {}): Promise<VerifyResult> {
  let lines = 0;
  try {
    const jwk = JSON.parse(fs.readFileSync(opts.keyFile ?? path.join(dir, KEY_FILE), 'utf8')) as JWK;
    const thumbprint = await calculateJwkThumbprint(jwk);
    if (jwk.kty !== 'OKP' || jwk.crv !== 'Ed25519' || jwk.d !== undefined)
      throw new Problem('the key is not an Ed25519 public JWK');
    const key = await importJWK(jwk, 'EdDSA');
    const jws = fs.readFileSync(path.join(dir, JWS_FILE), 'utf8').trim();
    let payload: Uint8Array;
    let header: { alg?: string; kid?: string; typ?: string };
    try {
      ({ payload, protectedHeader: header } = await compactVerify(jws, key, { algorithms: ['EdDSA'] }));
    } catch {
      throw new Problem('manifest.jws: signature does not verify with the pinned key');
    }
    if (header.kid !== thumbprint)
      throw new Problem(`manifest.jws: kid ${header.kid} is not the pinned key (${thumbprint})`);
    if (header.typ !== JWS_TYPE) throw new Problem(`manifest.jws: typ is not ${JWS_TYPE}`);
    const signed = Buffer.from(payload).toString('utf8');
    const manifest = JSON.parse(signed) as Omit<Manifest, 'format'> & { format: string };
    if (manifest.format !== FORMAT) throw new Problem(`manifest: format is not ${FORMAT}`);
    const manifestFile = path.join(dir, MANIFEST_FILE);
    if (fs.existsSync(manifestFile) && canonicalJson(JSON.parse(fs.readFileSync(manifestFile, 'utf8'))) !== signed) {
      throw new Problem('manifest.json differs from the signed manifest');
    }

    const sha = createHash('sha256');
    let endsWithNewline = true;
    const input = exportLines(fs.createReadStream(path.join(dir, NDJSON_FILE)), (b) => {
      sha.update(b);
      endsWithNewline = b[b.length - 1] === 0x0a;
    });
    const counts = Object.fromEntries(RECORD_TYPES.map((t) => [t, 0])) as Record<RecordType, number>;
    let prevLine = '';
    let run: RunState | undefined;
    let chainIndex = 0;
    const closeRun = () => {
      if (!run) return;
      if (run.seq !== run.eventCount || run.head !== run.eventHead) {
        throw new Problem(
          `run ${run.runId}: its events (${run.seq}, head ${run.head || '-'}) do not match the run record`,
          run.line,
        );
      }
      const c = manifest.chains[chainIndex++];
      if (!c || c.runId !== run.runId || c.events !== run.seq || c.head !== run.head) {
        throw new Problem(`run ${run.runId}: chain head differs from the manifest`, run.line);
      }
    };

    for await (const text of input) {
      lines += 1;
      const n = lines;
      if (text === undefined) throw new Problem('not valid UTF-8 (bytes changed)', n);
      let parsed: ReturnType<typeof splitLine>;
      try {
        parsed = splitLine(text);
      } catch (e) {
        throw new Problem(`not a valid export line (${(e as Error).message})`, n);
      }
      if (!parsed.exact) throw new Problem('not in export form (bytes changed)', n);
      const expected = lineHash(prevLine, parsed.canonical);
      if (expected !== parsed.lineHash) throw new Problem('content does not match its lineHash (bytes changed)', n);
      prevLine = parsed.lineHash;
      const r = parsed.record;
      if (!(RECORD_TYPES as readonly string[]).includes(r.type))
        throw new Problem(`unknown record type ${String(r.type)}`, n);
      counts[r.type] += 1;
      if (r.type === 'run') {
        closeRun();
        const key: [string, string, string] = [String(r.startedUtc), String(r.dagId), String(r.runId)];
        if (run && compareKeys(run.key, key) >= 0)
          throw new Problem('runs are not in (startedUtc, dagId, runId) order', n);
        run = {
          line: n,
          runId: String(r.runId),
          key,
          eventCount: Number(r.eventCount),
          eventHead: String(r.eventHead),
          seq: 0,
          head: '',
          rank: 0,
        };
        continue;
      }
      if (!run || r.runId !== run.runId) throw new Problem(`${r.type} record outside its run`, n);
      if (RANK[r.type] < run.rank) throw new Problem(`${r.type} record out of order within run ${run.runId}`, n);
      run.rank = RANK[r.type];
      if (r.type === 'event') {
        if (r.seq !== run.seq + 1)
          throw new Problem(`event seq ${String(r.seq)} follows ${run.seq} in run ${run.runId}`, n);
        if (r.prevHash !== run.head)
          throw new Problem(`event prevHash does not link to the previous event of run ${run.runId}`, n);
        if (eventHash(r) !== r.hash)
          throw new Problem(`event hash does not match the event (run ${run.runId}, seq ${String(r.seq)})`, n);
        run.seq += 1;
        run.head = String(r.hash);
      }
    }
    closeRun();
    if (lines > 0 && !endsWithNewline) throw new Problem('export.ndjson does not end with a newline', lines);
    if (chainIndex !== manifest.chains.length)
      throw new Problem(`manifest lists ${manifest.chains.length} runs, export.ndjson has ${chainIndex}`);
    if (lines !== manifest.lines)
      throw new Problem(`manifest says ${manifest.lines} lines, export.ndjson has ${lines}`);
    for (const t of RECORD_TYPES) {
      if (counts[t] !== manifest.counts[t])
        throw new Problem(`manifest counts ${manifest.counts[t]} ${t} records, export.ndjson has ${counts[t]}`);
    }
    if (prevLine !== manifest.lastLineHash) throw new Problem('the last lineHash differs from the manifest');
    const digest = sha.digest('hex');
    if (digest !== manifest.sha256)
      throw new Problem(`SHA-256 of export.ndjson is ${digest}, the manifest says ${manifest.sha256}`);
    return { ok: true, lines, counts, kid: thumbprint };
  } catch (e) {
    if (e instanceof Problem) return { ok: false, lines, problem: { line: e.line, message: e.message } };
    return { ok: false, lines, problem: { message: e instanceof Error ? e.message : String(e) } };
  }
}

/**
 * The lines of export.ndjson as the verifier needs them: exact text, split at LF only, so a CR
 * (CRLF endings, a stray CR) stays in its line and fails that line's export-form check. A line
 * that is not valid UTF-8 comes out as undefined. Every byte goes to `onBytes` first.
 */
async function* exportLines(
  input: AsyncIterable<Buffer>,
  onBytes: (chunk: Buffer) => void,
): AsyncGenerator<string | undefined> {
  const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });
  const decode = (parts: Buffer[]): string | undefined => {
    try {
      return utf8.decode(parts.length === 1 ? parts[0] : Buffer.concat(parts));
    } catch {
      return undefined;
    }
  };
  let partial: Buffer[] = [];
  for await (const chunk of input) {
    if (chunk.length === 0) continue;
    onBytes(chunk);
    let start = 0;
    for (let nl = chunk.indexOf(0x0a); nl !== -1; nl = chunk.indexOf(0x0a, start)) {
      partial.push(chunk.subarray(start, nl));
      yield decode(partial);
      partial = [];
      start = nl + 1;
    }
    if (start < chunk.length) partial.push(chunk.subarray(start));
  }
  if (partial.length > 0) yield decode(partial);
}

function compareKeys(a: [string, string, string], b: [string, string, string]): number {
  for (let i = 0; i < 3; i++) {
    if (a[i] !== b[i]) return a[i] < b[i] ? -1 : 1;
  }
  return 0;
}
