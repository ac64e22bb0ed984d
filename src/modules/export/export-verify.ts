import { createHash } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { calculateJwkThumbprint, compactVerify, decodeProtectedHeader, importJWK, type JWK } from 'jose';
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
import { AUDIT_FORMAT, type AuditManifest } from './audit-export-format';
import { AuditVerifyProblem, verifyAuditLines } from './audit-export-verify';

export interface VerifyResult {
  ok: boolean;
  lines: number;
  /** Records per type (an audit export's entries count as `audit`). */
  counts?: Partial<Record<RecordType | 'audit', number>>;
  /** The first problem: the 1-based line of the NDJSON file when it is in a line. */
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

/** Where the signed manifest of an export comes from, and where its records end. */
interface SignedSource {
  /** The NDJSON records, as a file and how many of its bytes are records (the rest is the manifest line). */
  ndjson: string;
  recordBytes?: number;
  /** How the NDJSON file is named in messages. */
  name: string;
  jws: string;
  /** The manifest as written beside the signature (manifest.json, or the manifest line's own copy). */
  manifestCopy?: { where: string; value: unknown };
  keyFile: string;
}

/**
 * Verifies an export directory (the `ordo export --out DIR` form) offline: the manifest's JWS
 * against the pinned public key (default DIR/instance-key.jwk.json), manifest.json against the
 * signed payload, then every line (see verifySigned).
 */
export async function verifyExport(dir: string, opts: { keyFile?: string } = {}): Promise<VerifyResult> {
  return verifying(async () => {
    const manifestFile = path.join(dir, MANIFEST_FILE);
    return verifySigned({
      ndjson: path.join(dir, NDJSON_FILE),
      name: NDJSON_FILE,
      jws: readText(path.join(dir, JWS_FILE), 'the signed manifest').trim(),
      manifestCopy: fs.existsSync(manifestFile)
        ? { where: MANIFEST_FILE, value: parseJson(readText(manifestFile, 'the manifest'), manifestFile) }
        : undefined,
      keyFile: opts.keyFile ?? path.join(dir, KEY_FILE),
    });
  });
}

/**
 * Verifies one NDJSON file in the HTTP form (`GET /api/v1/export`: the records, then one last line
 * `{"type":"manifest","manifest","jws","kid","publicJwk"}`) offline, against a pinned key file
 * (a public JWK or a JWK set). The key the line carries is never trusted: only the pinned one is.
 */
export async function verifyExportFile(file: string, opts: { keyFile: string }): Promise<VerifyResult> {
  return verifying(async () => {
    const name = path.basename(file);
    const { text, offset, line } = readLastLine(file, name);
    let last: Record<string, unknown>;
    try {
      last = JSON.parse(text) as Record<string, unknown>;
    } catch {
      throw new Problem(`the last line is not the signed manifest (not JSON)${MANIFEST_LINE_HINT}`, line);
    }
    if (!last || typeof last !== 'object' || last.type !== 'manifest' || typeof last.jws !== 'string')
      throw new Problem(`the last line is not the signed manifest {"type":"manifest",…}${MANIFEST_LINE_HINT}`, line);
    return verifySigned(
      {
        ndjson: file,
        recordBytes: offset,
        name,
        jws: last.jws,
        manifestCopy: { where: `the manifest line (line ${line})`, value: last.manifest },
        keyFile: opts.keyFile,
      },
      line,
    );
  });
}

const MANIFEST_LINE_HINT =
  ': a file from GET /api/v1/export ends with it; for a directory written by `ordo export --out`, run `ordo export verify DIR`';

async function verifying(fn: () => Promise<VerifyResult>): Promise<VerifyResult> {
  try {
    return await fn();
  } catch (e) {
    if (e instanceof Problem) return { ok: false, lines: 0, problem: { line: e.line, message: e.message } };
    return { ok: false, lines: 0, problem: { message: e instanceof Error ? e.message : String(e) } };
  }
}

function readText(file: string, what: string): string {
  try {
    return fs.readFileSync(file, 'utf8');
  } catch (e) {
    throw new Problem(`cannot read ${what} ${file}: ${ioReason(e)}`);
  }
}

function ioReason(e: unknown): string {
  const code = (e as NodeJS.ErrnoException).code;
  if (code === 'ENOENT') return 'no such file';
  if (code === 'EACCES' || code === 'EPERM') return 'permission denied';
  if (code === 'EISDIR') return 'it is a directory';
  return e instanceof Error ? e.message : String(e);
}

function parseJson(text: string, file: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    throw new Problem(`${file} is not JSON`);
  }
}

/**
 * The last line of `file` (its text, the byte offset where it starts and its 1-based number),
 * read from the end, so a large export is not read twice whole. The file must end with a newline.
 */
function readLastLine(file: string, name: string): { text: string; offset: number; line: number } {
  let fd: number;
  try {
    fd = fs.openSync(file, 'r');
  } catch (e) {
    throw new Problem(`cannot read ${file}: ${ioReason(e)}`);
  }
  try {
    const size = fs.fstatSync(fd).size;
    if (size === 0) throw new Problem(`${name} is empty`);
    const last = Buffer.alloc(1);
    fs.readSync(fd, last, 0, 1, size - 1);
    if (last[0] !== 0x0a) throw new Problem(`${name} does not end with a newline (cut short?)`);
    const chunks: Buffer[] = [];
    let start = size - 1;
    for (;;) {
      const from = Math.max(0, start - 65536);
      const buf = Buffer.alloc(start - from);
      fs.readSync(fd, buf, 0, buf.length, from);
      const nl = buf.lastIndexOf(0x0a);
      chunks.unshift(nl === -1 ? buf : buf.subarray(nl + 1));
      if (nl !== -1) {
        start = from + nl + 1;
        break;
      }
      start = from;
      if (from === 0) break;
    }
    const text = Buffer.concat(chunks).toString('utf8');
    // The line number: newlines before the last line, plus one.
    let line = 1;
    const buf = Buffer.alloc(65536);
    for (let pos = 0; pos < start;) {
      const n = fs.readSync(fd, buf, 0, Math.min(buf.length, start - pos), pos);
      for (let i = 0; i < n; i++) if (buf[i] === 0x0a) line++;
      pos += n;
    }
    return { text, offset: start, line };
  } finally {
    fs.closeSync(fd);
  }
}

/** The pinned public keys of a key file: one Ed25519 public JWK or a JWK set {"keys": [...]}. */
async function pinnedKeys(file: string): Promise<{ thumbprint: string; jwk: JWK }[]> {
  const raw = parseJson(readText(file, 'the key file'), file) as { keys?: unknown } | null;
  const list: unknown[] = raw && typeof raw === 'object' && Array.isArray(raw.keys) ? raw.keys : [raw];
  if (list.length === 0) throw new Problem(`${file} is an empty JWK set`);
  const keys = [];
  for (const k of list) {
    const jwk = k as JWK;
    if (!jwk || typeof jwk !== 'object' || jwk.kty !== 'OKP' || jwk.crv !== 'Ed25519' || typeof jwk.x !== 'string')
      throw new Problem(`${file}: the key is not an Ed25519 public JWK`);
    if (jwk.d !== undefined)
      throw new Problem(`${file} holds a private key (member d): pin the public key only (ordo keys export --public)`);
    keys.push({ thumbprint: await calculateJwkThumbprint({ kty: jwk.kty, crv: jwk.crv, x: jwk.x }), jwk });
  }
  return keys;
}

/**
 * Verifies a signed export (a run export, or an operator audit export: its manifest's format
 * says which; see verifyAuditLines): the manifest's JWS against the pinned public key whose RFC 7638
 * thumbprint is the JWS kid, the manifest's copy against the signed payload, then the NDJSON
 * records line by line (export form, line hash chain, record order, every run's event hash chain
 * recomputed and matched with its run record and the manifest's chain heads), and finally counts,
 * line count and SHA-256. Reads the NDJSON as a stream of exact lines: memory does not grow with
 * its size, and a changed byte is named at its line, whitespace, key order and line endings included.
 */
async function verifySigned(src: SignedSource, manifestLine?: number): Promise<VerifyResult> {
  let lines = 0;
  try {
    const pinned = await pinnedKeys(src.keyFile);
    let header: { alg?: string; kid?: string; typ?: string };
    try {
      header = decodeProtectedHeader(src.jws);
    } catch {
      throw new Problem('the manifest signature is not a JWS', manifestLine);
    }
    const match = pinned.find((k) => k.thumbprint === header.kid);
    if (!match) {
      const have = pinned.map((k) => k.thumbprint).join(', ');
      throw new Problem(
        `the export is signed by key ${String(header.kid)}, which is not the pinned key (${src.keyFile} holds ${have})`,
        manifestLine,
      );
    }
    const thumbprint = match.thumbprint;
    const key = await importJWK({ kty: 'OKP', crv: 'Ed25519', x: match.jwk.x }, 'EdDSA');
    let payload: Uint8Array;
    try {
      ({ payload, protectedHeader: header } = await compactVerify(src.jws, key, { algorithms: ['EdDSA'] }));
    } catch {
      throw new Problem(`the manifest signature does not verify with the pinned key ${thumbprint}`, manifestLine);
    }
    if (header.typ !== JWS_TYPE) throw new Problem(`the manifest signature: typ is not ${JWS_TYPE}`, manifestLine);
    const signed = Buffer.from(payload).toString('utf8');
    const manifest = JSON.parse(signed) as Omit<Manifest, 'format'> & { format: string };
    if (manifest.format !== FORMAT && manifest.format !== AUDIT_FORMAT)
      throw new Problem(`manifest: format is not ${FORMAT} (nor ${AUDIT_FORMAT})`, manifestLine);
    if (src.manifestCopy) {
      let copy: string | undefined;
      try {
        copy = canonicalJson(src.manifestCopy.value);
      } catch {
        copy = undefined;
      }
      if (copy !== signed)
        throw new Problem(`${src.manifestCopy.where} differs from the signed manifest`, manifestLine);
    }
    let records: AsyncIterable<Buffer>;
    try {
      fs.accessSync(src.ndjson, fs.constants.R_OK);
      // An export of no runs (HTTP form) is its manifest line alone: no record bytes to read.
      records =
        src.recordBytes === 0
          ? emptyStream()
          : fs.createReadStream(src.ndjson, src.recordBytes === undefined ? {} : { end: src.recordBytes - 1 });
    } catch (e) {
      throw new Problem(`cannot read ${src.ndjson}: ${ioReason(e)}`);
    }
    const NDJSON = src.name;
    const sha = createHash('sha256');
    let endsWithNewline = true;
    const input = exportLines(records, (b) => {
      sha.update(b);
      endsWithNewline = b[b.length - 1] === 0x0a;
    });
    if (manifest.format === AUDIT_FORMAT) {
      const audit = manifest as unknown as AuditManifest;
      let done: { lines: number; lastLineHash: string };
      try {
        done = await verifyAuditLines(input, audit);
      } catch (e) {
        if (e instanceof AuditVerifyProblem) throw new Problem(e.message, e.line);
        throw e;
      }
      lines = done.lines;
      if (lines > 0 && !endsWithNewline) throw new Problem(`${NDJSON} does not end with a newline`, lines);
      if (lines !== audit.lines) throw new Problem(`manifest says ${audit.lines} lines, ${NDJSON} has ${lines}`);
      if (lines !== audit.counts.audit)
        throw new Problem(`manifest counts ${audit.counts.audit} audit records, ${NDJSON} has ${lines}`);
      if (done.lastLineHash !== audit.lastLineHash) throw new Problem('the last lineHash differs from the manifest');
      const digest = sha.digest('hex');
      if (digest !== audit.sha256)
        throw new Problem(`SHA-256 of ${NDJSON} is ${digest}, the manifest says ${audit.sha256}`);
      return { ok: true, lines, counts: { audit: lines }, kid: thumbprint };
    }
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
    if (lines > 0 && !endsWithNewline) throw new Problem(`${NDJSON} does not end with a newline`, lines);
    if (chainIndex !== manifest.chains.length)
      throw new Problem(`manifest lists ${manifest.chains.length} runs, ${NDJSON} has ${chainIndex}`);
    if (lines !== manifest.lines) throw new Problem(`manifest says ${manifest.lines} lines, ${NDJSON} has ${lines}`);
    for (const t of RECORD_TYPES) {
      if (counts[t] !== manifest.counts[t])
        throw new Problem(`manifest counts ${manifest.counts[t]} ${t} records, ${NDJSON} has ${counts[t]}`);
    }
    if (prevLine !== manifest.lastLineHash) throw new Problem('the last lineHash differs from the manifest');
    const digest = sha.digest('hex');
    if (digest !== manifest.sha256)
      throw new Problem(`SHA-256 of ${NDJSON} is ${digest}, the manifest says ${manifest.sha256}`);
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

async function* emptyStream(): AsyncGenerator<Buffer> {}

function compareKeys(a: [string, string, string], b: [string, string, string]): number {
  for (let i = 0; i < 3; i++) {
    if (a[i] !== b[i]) return a[i] < b[i] ? -1 : 1;
  }
  return 0;
}
