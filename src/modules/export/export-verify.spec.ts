import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { calculateJwkThumbprint, CompactSign, exportJWK, generateKeyPair } from 'jose';
import { canonicalJson } from '../../core/json/canonical-json';
import {
  ExportWriter,
  JWS_FILE,
  JWS_TYPE,
  KEY_FILE,
  MANIFEST_FILE,
  NDJSON_FILE,
  eventHash,
  type ExportRecord,
} from './export-format';
import { verifyExport, verifyExportFile } from './export-verify';

/** Two runs of three events each, a step and a log: 10 lines, signed with a fresh key. */
async function writeExport(dir: string): Promise<string> {
  const w = new ExportWriter('acme', { from: null, to: null, dagId: null });
  let text = '';
  for (const [i, runId] of ['6f1c0000-0000-4000-8000-000000000001', '6f1c0000-0000-4000-8000-000000000002'].entries()) {
    const events: ExportRecord[] = [];
    let prevHash = '';
    for (let seq = 1; seq <= 3; seq++) {
      const e: ExportRecord = {
        type: 'event',
        runId,
        seq,
        createdAt: `2026-01-0${i + 1}T00:00:0${seq}.000Z`,
        eventType: seq === 1 ? 'run.created' : 'step.succeeded',
        stepId: seq === 1 ? null : 'fetch',
        attempt: seq === 1 ? null : 1,
        actor: 'system',
        data: { note: 'abc', n: seq },
        prevHash,
      };
      e.hash = eventHash(e);
      prevHash = String(e.hash);
      events.push(e);
    }
    text += w.line({
      type: 'run',
      runId,
      dagId: 'ingest',
      startedUtc: `2026-01-0${i + 1}T00:00:00.000Z`,
      eventCount: 3,
      eventHead: prevHash,
    });
    for (const e of events) text += w.line(e);
    if (i === 0) {
      text += w.line({ type: 'step', runId, stepId: 'fetch', status: 'succeeded' });
      text += w.line({ type: 'log', runId, stepId: 'fetch', line: 'fetched 3 rows' });
    }
    w.chain({ runId, events: 3, head: prevHash });
  }
  const manifest = w.manifest();
  const { publicKey, privateKey } = await generateKeyPair('EdDSA', { crv: 'Ed25519' });
  const jwk = await exportJWK(publicKey);
  const kid = await calculateJwkThumbprint(jwk);
  const jws = await new CompactSign(Buffer.from(canonicalJson(manifest), 'utf8'))
    .setProtectedHeader({ alg: 'EdDSA', kid, typ: JWS_TYPE })
    .sign(privateKey);
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(path.join(dir, NDJSON_FILE), text);
  fs.writeFileSync(path.join(dir, MANIFEST_FILE), JSON.stringify(manifest, null, 2));
  fs.writeFileSync(path.join(dir, JWS_FILE), `${jws}\n`);
  fs.writeFileSync(path.join(dir, KEY_FILE), JSON.stringify(jwk));
  return text;
}

describe('verifyExport', () => {
  let tmp: string;
  let dir: string;
  let original: string;
  beforeAll(async () => {
    tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'ordo-verify-'));
    dir = path.join(tmp, 'export');
    original = await writeExport(dir);
  });
  afterAll(() => fs.rmSync(tmp, { recursive: true, force: true }));

  const lines = () => original.split('\n').slice(0, -1);
  /** Verifies the export with its NDJSON replaced by `bytes`, then puts the original back. */
  const verifyWith = async (bytes: string | Buffer) => {
    fs.writeFileSync(path.join(dir, NDJSON_FILE), bytes);
    try {
      return await verifyExport(dir);
    } finally {
      fs.writeFileSync(path.join(dir, NDJSON_FILE), original);
    }
  };
  const withLine = (n: number, edit: (line: string) => string) =>
    `${lines()
      .map((l, i) => (i === n - 1 ? edit(l) : l))
      .join('\n')}\n`;

  it('accepts the export as written and counts its records', async () => {
    expect(await verifyExport(dir)).toMatchObject({
      ok: true,
      lines: 10,
      counts: { run: 2, event: 6, step: 1, log: 1, attempt: 0, metric: 0, span: 0 },
    });
  });

  it.each([
    ['a changed letter in a value', 3, (l: string) => l.replace('"abc"', '"abd"'), /does not match its lineHash/],
    ['a space after the opening brace', 4, (l: string) => l.replace('{', '{ '), /not in export form/],
    [
      'two keys swapped',
      2,
      (l: string) => l.replace('{"actor":"system","attempt":null,', '{"attempt":null,"actor":"system",'),
      /not in export form/,
    ],
    ['a letter written as a \\u escape', 8, (l: string) => l.replace('"abc"', '"\\u0061bc"'), /not in export form/],
    ['a number written as 2.0', 3, (l: string) => l.replace('"n":2', '"n":2.0'), /not in export form/],
    ['a CR before the newline', 5, (l: string) => `${l}\r`, /not in export form/],
    ['a line cut short', 6, (l: string) => l.slice(0, 40), /not a valid export line/],
    ['a JSON null instead of the record', 8, () => 'null', /not a valid export line/],
    ['an empty line instead of the record', 9, () => '', /not a valid export line/],
  ])('names the line with %s', async (_what, n, edit, message) => {
    const r = await verifyWith(withLine(n, edit));
    expect(r).toMatchObject({ ok: false, problem: { line: n, message: expect.stringMatching(message) } });
  });

  it('names the line after which an empty line is inserted, and a removed line by its successor', async () => {
    const l = lines();
    const inserted = await verifyWith(`${[...l.slice(0, 4), '', ...l.slice(4)].join('\n')}\n`);
    expect(inserted.problem).toEqual({ line: 5, message: expect.stringMatching(/not a valid export line/) });
    const removed = await verifyWith(`${[...l.slice(0, 4), ...l.slice(5)].join('\n')}\n`);
    expect(removed.problem).toEqual({ line: 5, message: expect.stringMatching(/does not match its lineHash/) });
  });

  it('names the first line when every line ends in CRLF', async () => {
    const r = await verifyWith(`${lines().join('\r\n')}\r\n`);
    expect(r.problem).toEqual({ line: 1, message: expect.stringMatching(/not in export form/) });
  });

  it('names a line that is not valid UTF-8', async () => {
    const withReplacement = withLine(8, (l) => l.replace('"abc"', '"a\uFFFDc"'));
    const bytes = Buffer.from(withReplacement, 'utf8');
    const at = bytes.indexOf(Buffer.from('\uFFFD', 'utf8'));
    const invalid = Buffer.concat([bytes.subarray(0, at), Buffer.from([0xff]), bytes.subarray(at + 3)]);
    const r = await verifyWith(invalid);
    expect(r.problem).toEqual({ line: 8, message: 'not valid UTF-8 (bytes changed)' });
  });

  it('refuses a last line without its newline and a trailing empty line', async () => {
    expect((await verifyWith(original.slice(0, -1))).problem).toEqual({
      line: 10,
      message: 'export.ndjson does not end with a newline',
    });
    expect((await verifyWith(`${original}\n`)).problem).toEqual({
      line: 11,
      message: expect.stringMatching(/not a valid export line/),
    });
  });

  it('refuses a byte order mark and an empty file', async () => {
    expect((await verifyWith(`\uFEFF${original}`)).problem).toEqual({
      line: 1,
      message: expect.stringMatching(/not a valid export line/),
    });
    expect((await verifyWith('')).problem?.message).toMatch(/manifest lists 2 runs, export.ndjson has 0/);
  });

  it('reads lines split across read chunks', async () => {
    // A line longer than the 64 KiB read size spans chunks; it is still read and checked whole.
    const w = new ExportWriter('acme', { from: null, to: null, dagId: null });
    const big = path.join(tmp, 'big');
    fs.mkdirSync(big);
    for (const f of [MANIFEST_FILE, JWS_FILE, KEY_FILE]) fs.copyFileSync(path.join(dir, f), path.join(big, f));
    fs.writeFileSync(
      path.join(big, NDJSON_FILE),
      w.line({ type: 'run', runId: 'r', dagId: 'd', startedUtc: 'x', pad: 'é'.repeat(100_000) }),
    );
    const r = await verifyExport(big);
    // The line is intact (its hash checks); the signed manifest is another export's.
    expect(r).toMatchObject({ ok: false, lines: 1 });
    expect(r.problem?.message).toMatch(/events .* do not match the run record|chain head differs/);
  });
});

describe('verifyExportFile (the HTTP form: records, then the signed manifest line)', () => {
  let tmp: string;
  let keyFile: string;
  let http: string;

  /** The records, then `{"type":"manifest", manifest, jws, kid, publicJwk}`, as GET /api/v1/export ends. */
  const httpForm = (records: string, manifest: unknown, jws: string, publicJwk: unknown): string =>
    `${records}${canonicalJson({ type: 'manifest', manifest, jws, kid: 'k', publicJwk })}\n`;

  beforeAll(async () => {
    tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'ordo-verify-file-'));
    const dir = path.join(tmp, 'export');
    const records = await writeExport(dir);
    keyFile = path.join(dir, KEY_FILE);
    const manifest: unknown = JSON.parse(fs.readFileSync(path.join(dir, MANIFEST_FILE), 'utf8'));
    const jws = fs.readFileSync(path.join(dir, JWS_FILE), 'utf8').trim();
    http = httpForm(records, manifest, jws, JSON.parse(fs.readFileSync(keyFile, 'utf8')));
  });
  afterAll(() => fs.rmSync(tmp, { recursive: true, force: true }));

  const verifyText = async (text: string, key = keyFile) => {
    const file = path.join(tmp, 'export.ndjson');
    fs.writeFileSync(file, text);
    return verifyExportFile(file, { keyFile: key });
  };

  it('accepts the HTTP form with the key as a JWK or inside a JWK set', async () => {
    expect(await verifyText(http)).toMatchObject({ ok: true, lines: 10, counts: { run: 2, event: 6 } });
    const set = path.join(tmp, 'set.jwk.json');
    fs.writeFileSync(set, JSON.stringify({ keys: [JSON.parse(fs.readFileSync(keyFile, 'utf8'))] }));
    expect(await verifyText(http, set)).toMatchObject({ ok: true, lines: 10 });
  });

  it('accepts an export of no runs (the manifest line alone)', async () => {
    const manifest = new ExportWriter('acme', { from: null, to: null, dagId: null }).manifest();
    const { publicKey, privateKey } = await generateKeyPair('EdDSA', { crv: 'Ed25519' });
    const jwk = await exportJWK(publicKey);
    const jws = await new CompactSign(Buffer.from(canonicalJson(manifest), 'utf8'))
      .setProtectedHeader({ alg: 'EdDSA', kid: await calculateJwkThumbprint(jwk), typ: JWS_TYPE })
      .sign(privateKey);
    const key = path.join(tmp, 'empty.jwk.json');
    fs.writeFileSync(key, JSON.stringify(jwk));
    expect(await verifyText(httpForm('', manifest, jws, jwk), key)).toMatchObject({ ok: true, lines: 0 });
  });

  it('names a changed record line, and the manifest line when it differs from the signed manifest', async () => {
    const lines = http.split('\n');
    const changed = lines.map((l, i) => (i === 2 ? l.replace('"abc"', '"abd"') : l)).join('\n');
    expect((await verifyText(changed)).problem).toEqual({ line: 3, message: expect.stringMatching(/lineHash/) });
    const manifestAt = lines.length - 2;
    const counts = lines.map((l, i) => (i === manifestAt ? l.replace('"run":2', '"run":1') : l)).join('\n');
    expect((await verifyText(counts)).problem).toEqual({
      line: 11,
      message: 'the manifest line (line 11) differs from the signed manifest',
    });
  });

  it('refuses a file cut short and a file whose last line is not the manifest', async () => {
    expect((await verifyText(http.slice(0, -10))).problem?.message).toMatch(/does not end with a newline/);
    const records = http.split('\n').slice(0, -2).join('\n') + '\n';
    expect((await verifyText(records)).problem).toEqual({
      line: 10,
      message: expect.stringMatching(/^the last line is not the signed manifest/),
    });
  });
});
