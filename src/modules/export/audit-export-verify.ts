import { AUDIT_GENESIS_HASH, operatorAuditHash } from '../plans/operator-audit.repository';
import type { AuditManifest } from './audit-export-format';
import { lineHash, splitLine } from './export-format';

/** A problem in an audit export, at a 1-based line when it is in one. */
export class AuditVerifyProblem extends Error {
  constructor(
    message: string,
    readonly line?: number,
  ) {
    super(message);
  }
}

interface Entry {
  seq: number;
  at: string;
  actor: string;
  tokenJti: string;
  action: string;
  tenantId: string | null;
  planId: string | null;
  reason: string | null;
  detail: Record<string, unknown>;
  prevHash: string;
  hash: string;
}

const str = (v: unknown): v is string => typeof v === 'string';
const strOrNull = (v: unknown): v is string | null => v === null || typeof v === 'string';

function entryOf(r: Record<string, unknown>): Entry | undefined {
  const ok =
    Number.isSafeInteger(r.seq) &&
    (r.seq as number) >= 1 &&
    str(r.at) &&
    str(r.actor) &&
    str(r.tokenJti) &&
    str(r.action) &&
    strOrNull(r.tenantId) &&
    strOrNull(r.planId) &&
    strOrNull(r.reason) &&
    typeof r.detail === 'object' &&
    r.detail !== null &&
    !Array.isArray(r.detail) &&
    str(r.prevHash) &&
    str(r.hash);
  return ok ? (r as unknown as Entry) : undefined;
}

/**
 * Checks the lines of an audit export against its (already verified) signed manifest: each line's
 * form and line hash, each entry's own hash (operatorAuditHash, the chain's one rule), seq order,
 * the range and tenant the manifest names, and, for an export of the whole log, the chain itself:
 * consecutive seqs each linking to the previous entry's hash, from the genesis hash when the export
 * starts at the first entry. Returns the number of lines and the last line hash; throws an
 * AuditVerifyProblem naming the first bad line.
 */
export async function verifyAuditLines(
  input: AsyncIterable<string | undefined>,
  manifest: AuditManifest,
): Promise<{ lines: number; lastLineHash: string }> {
  let lines = 0;
  let prevLine = '';
  let prev: Entry | undefined;
  let first: Entry | undefined;
  const whole = manifest.tenant === null;
  for await (const text of input) {
    lines += 1;
    const n = lines;
    if (text === undefined) throw new AuditVerifyProblem('not valid UTF-8 (bytes changed)', n);
    let parsed: ReturnType<typeof splitLine>;
    try {
      parsed = splitLine(text);
    } catch (e) {
      throw new AuditVerifyProblem(`not a valid export line (${(e as Error).message})`, n);
    }
    if (!parsed.exact) throw new AuditVerifyProblem('not in export form (bytes changed)', n);
    if (lineHash(prevLine, parsed.canonical) !== parsed.lineHash)
      throw new AuditVerifyProblem('content does not match its lineHash (bytes changed)', n);
    prevLine = parsed.lineHash;
    const { type, ...fields } = parsed.record as Record<string, unknown>;
    if (type !== 'audit') throw new AuditVerifyProblem(`unknown record type ${String(type)}`, n);
    const e = entryOf(fields);
    if (!e) throw new AuditVerifyProblem('not an audit entry (a field is missing or of the wrong type)', n);
    const { hash, ...hashed } = e;
    if (operatorAuditHash(hashed) !== hash)
      throw new AuditVerifyProblem(`entry ${e.seq}: its hash does not match the entry (changed)`, n);
    if (manifest.range.fromSeq !== null && e.seq < manifest.range.fromSeq)
      throw new AuditVerifyProblem(`entry ${e.seq} is before the exported range`, n);
    if (e.seq > manifest.range.toSeq) throw new AuditVerifyProblem(`entry ${e.seq} is after the exported range`, n);
    if (!whole && e.tenantId !== manifest.tenant)
      throw new AuditVerifyProblem(`entry ${e.seq} is not about tenant ${String(manifest.tenant)}`, n);
    if (prev) {
      if (e.seq <= prev.seq) throw new AuditVerifyProblem(`entry ${e.seq} follows entry ${prev.seq}`, n);
      if (whole && e.seq !== prev.seq + 1)
        throw new AuditVerifyProblem(`entries ${prev.seq + 1}–${e.seq - 1} are missing`, n);
      if (whole && e.prevHash !== prev.hash)
        throw new AuditVerifyProblem(`entry ${e.seq}: prevHash does not link to entry ${prev.seq}`, n);
    } else if (whole) {
      const start = manifest.range.fromSeq ?? 1;
      if (e.seq !== start) throw new AuditVerifyProblem(`the export starts at entry ${e.seq}, not ${start}`, n);
      if (e.seq === 1 && e.prevHash !== AUDIT_GENESIS_HASH)
        throw new AuditVerifyProblem('entry 1: prevHash is not the genesis hash', n);
    }
    first ??= e;
    prev = e;
  }
  const c = manifest.chain;
  const same =
    (first ? c.first?.seq === first.seq && c.first.prevHash === first.prevHash : c.first === null) &&
    (prev ? c.last?.seq === prev.seq && c.last.hash === prev.hash : c.last === null);
  if (!same) throw new AuditVerifyProblem('the entries do not match the chain ends the manifest names');
  if (whole && prev && prev.seq !== manifest.range.toSeq)
    throw new AuditVerifyProblem(`entries ${prev.seq + 1}–${manifest.range.toSeq} are missing`);
  if (whole && !prev && manifest.range.toSeq >= (manifest.range.fromSeq ?? 1))
    throw new AuditVerifyProblem(
      `the manifest's range ends at entry ${manifest.range.toSeq}, but no entry is exported`,
    );
  return { lines, lastLineHash: prevLine };
}
