import { createHash } from 'node:crypto';
import { canonicalJson } from '../../core/json/canonical-json';
import type { JsonObject } from '../plugins/plugin';
import { chainHash, hashedBody } from '../runs/run-events';

/**
 * The NDJSON audit export, format `ordo-export/1`.
 *
 * Every line is the RFC 8785 canonical JSON of one record `{type, ...}` with `lineHash` appended, where
 * lineHash = SHA-256 hex of (previous line's lineHash || canonical JSON of the record without
 * lineHash); the first previous value is ''. A changed byte therefore breaks the line it is in,
 * and verification names that line. Records of a run follow it in this order: run, events (by
 * seq), steps (topological), attempts (step, attempt), logs, metrics, spans (start time). Runs are
 * sorted by (startedUtc, dagId, runId). The last line of the HTTP form is the signed manifest.
 */
export const FORMAT = 'ordo-export/1';

export const RECORD_TYPES = ['run', 'event', 'step', 'attempt', 'log', 'metric', 'span'] as const;
export type RecordType = (typeof RECORD_TYPES)[number];

export type ExportRecord = { type: RecordType } & Record<string, unknown>;

export interface ChainHead {
  runId: string;
  events: number;
  head: string;
}

export interface Manifest {
  format: typeof FORMAT;
  tenant: string;
  range: { from: string | null; to: string | null; dagId: string | null };
  counts: Record<RecordType, number>;
  lines: number;
  sha256: string;
  lastLineHash: string;
  chains: ChainHead[];
}

export const NDJSON_FILE = 'export.ndjson';
export const MANIFEST_FILE = 'manifest.json';
export const JWS_FILE = 'manifest.jws';
export const KEY_FILE = 'instance-key.jwk.json';
export const JWS_TYPE = 'ordo-export-manifest+json';

export function lineHash(prev: string, canonicalRecord: string): string {
  return createHash('sha256').update(prev, 'utf8').update(canonicalRecord, 'utf8').digest('hex');
}

/** Builds the lines of an export, keeping the running SHA-256, counts, line chain and per-run chain heads. */
export class ExportWriter {
  private readonly sha = createHash('sha256');
  private prevLine = '';
  private lines = 0;
  private readonly counts = Object.fromEntries(RECORD_TYPES.map((t) => [t, 0])) as Record<RecordType, number>;
  private readonly chains: ChainHead[] = [];

  constructor(
    private readonly tenant: string,
    private readonly range: Manifest['range'],
  ) {}

  /** The NDJSON line (with its newline) for a record. */
  line(record: ExportRecord): string {
    const body = canonicalJson(record);
    this.prevLine = lineHash(this.prevLine, body);
    const text = `${formatLine(body, this.prevLine)}\n`;
    this.sha.update(text, 'utf8');
    this.lines += 1;
    this.counts[record.type] += 1;
    return text;
  }

  /** Records a run's chain head (its last event's hash and the number of events exported). */
  chain(head: ChainHead): void {
    this.chains.push(head);
  }

  manifest(): Manifest {
    return {
      format: FORMAT,
      tenant: this.tenant,
      range: this.range,
      counts: { ...this.counts },
      lines: this.lines,
      sha256: this.sha.copy().digest('hex'),
      lastLineHash: this.prevLine,
      chains: this.chains,
    };
  }
}

/** A line's form: the canonical JSON of its record with `,"lineHash":"…"` before the closing brace. */
export function formatLine(canonicalRecord: string, hash: string): string {
  return `${canonicalRecord.slice(0, -1)},"lineHash":"${hash}"}`;
}

/** Parses a line (without its newline); `exact` says whether it is byte-for-byte in export form. */
export function splitLine(text: string): { record: ExportRecord; lineHash: string; canonical: string; exact: boolean } {
  const parsed = JSON.parse(text) as Record<string, unknown>;
  if (!parsed || typeof parsed !== 'object' || Array.isArray(parsed)) throw new Error('not a JSON object');
  const { lineHash: lh, ...record } = parsed;
  if (typeof lh !== 'string') throw new Error('no lineHash');
  const canonical = canonicalJson(record);
  return { record: record as ExportRecord, lineHash: lh, canonical, exact: formatLine(canonical, lh) === text };
}

/** The hash a stored event must have, recomputed from its exported fields. */
export function eventHash(e: Record<string, unknown>): string {
  return chainHash(
    String(e.prevHash),
    hashedBody({
      runId: String(e.runId),
      seq: Number(e.seq),
      createdAt: String(e.createdAt),
      type: String(e.eventType),
      stepId: (e.stepId as string | null) ?? null,
      attempt: (e.attempt as number | null) ?? null,
      actor: String(e.actor),
      data: (e.data ?? {}) as JsonObject,
    }),
  );
}

const SECRET_KEY = /authorization|token|secret|password|passwd|cookie|api[-_]?key|private[-_]?key|credential/i;

/** Replaces the values of keys named like credentials (plugin configs may carry literal ones). */
export function redactSecrets(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(redactSecrets);
  if (value && typeof value === 'object' && !(value instanceof Date)) {
    // fromEntries defines own data properties, so a config key named __proto__ stays a plain key.
    return Object.fromEntries(
      Object.entries(value as Record<string, unknown>).map(([k, v]) => [
        k,
        SECRET_KEY.test(k) ? '[redacted]' : redactSecrets(v),
      ]),
    );
  }
  return value;
}

export function iso(d: Date | null | undefined): string | null {
  return d ? d.toISOString() : null;
}

/** Seconds between two instants (millisecond precision), or null when either is missing. */
export function seconds(from: Date | null | undefined, to: Date | null | undefined): number | null {
  if (!from || !to) return null;
  return Math.max(0, to.getTime() - from.getTime()) / 1000;
}
