import { createHash } from 'node:crypto';
import { canonicalJson } from '../../core/json/canonical-json';
import type { OperatorAuditEntry } from '../plans/operator-audit.repository';
import { formatLine, lineHash } from './export-format';

/**
 * The operator audit log's NDJSON export, format `ordo-audit-export/1`: the lines of the run
 * export's form (RFC 8785 canonical JSON of a record with `lineHash` appended, chained from ''),
 * one record `{type: "audit", seq, at, actor, tokenJti, action, tenantId, planId, reason, detail,
 * prevHash, hash}` per entry in seq order, and a manifest signed like the run export's. Each entry
 * carries its own hash chain (operatorAuditHash), so a verifier checks the entries themselves, not
 * only the lines.
 */
export const AUDIT_FORMAT = 'ordo-audit-export/1';

export type AuditRecord = { type: 'audit' } & OperatorAuditEntry;

export interface AuditManifest {
  format: typeof AUDIT_FORMAT;
  /** The tenant the entries were chosen by, or null for the whole log. */
  tenant: string | null;
  /** The seq range exported (toSeq: the log's last entry when the export began, at most). */
  range: { fromSeq: number | null; toSeq: number };
  counts: { audit: number };
  lines: number;
  sha256: string;
  lastLineHash: string;
  /** The first entry's seq and prevHash, and the last entry's seq and hash (null: no entry). */
  chain: { first: { seq: number; prevHash: string } | null; last: { seq: number; hash: string } | null };
}

export function auditRecord(e: OperatorAuditEntry): AuditRecord {
  return {
    type: 'audit',
    seq: e.seq,
    at: e.at,
    actor: e.actor,
    tokenJti: e.tokenJti,
    action: e.action,
    tenantId: e.tenantId,
    planId: e.planId,
    reason: e.reason,
    detail: e.detail,
    prevHash: e.prevHash,
    hash: e.hash,
  };
}

/** Builds the lines of an audit export with the running SHA-256, line chain and chain ends. */
export class AuditExportWriter {
  private readonly sha = createHash('sha256');
  private prevLine = '';
  private lines = 0;
  private first: AuditManifest['chain']['first'] = null;
  private last: AuditManifest['chain']['last'] = null;

  constructor(
    private readonly tenant: string | null,
    private readonly range: AuditManifest['range'],
  ) {}

  line(e: OperatorAuditEntry): string {
    const body = canonicalJson(auditRecord(e));
    this.prevLine = lineHash(this.prevLine, body);
    const text = `${formatLine(body, this.prevLine)}\n`;
    this.sha.update(text, 'utf8');
    this.lines += 1;
    this.first ??= { seq: e.seq, prevHash: e.prevHash };
    this.last = { seq: e.seq, hash: e.hash };
    return text;
  }

  manifest(): AuditManifest {
    return {
      format: AUDIT_FORMAT,
      tenant: this.tenant,
      range: this.range,
      counts: { audit: this.lines },
      lines: this.lines,
      sha256: this.sha.copy().digest('hex'),
      lastLineHash: this.prevLine,
      chain: { first: this.first, last: this.last },
    };
  }
}
