import { Injectable } from '@nestjs/common';
import { CompactSign, type JWK } from 'jose';
import { Database } from '../../core/database/database';
import { badRequest } from '../../core/errors/domain-error';
import { canonicalJson } from '../../core/json/canonical-json';
import { DERIVED_SPANS } from '../../core/telemetry/tracing';
import { SigningKeys } from '../auth/signing-keys';
import { ExportWriter, JWS_TYPE, iso, redactSecrets, seconds, type ExportRecord, type Manifest } from './export-format';
import { countingFailures } from './export-failures';
import { ExportRepository, type ExportRange, type RunKey } from './export.repository';
import { runSpan, stepSpan } from './step-spans';
import { DEFAULT_PRIORITY } from '../runs/run-plan';
import { QuotaChecks } from '../plans/quota-checks';
import { quotaExceeded } from '../plans/quota-exceeded';

const RUN_PAGE = 100;
const EVENT_PAGE = 2000;

export interface ExportRequest {
  from?: string;
  to?: string;
  dagId?: string;
}

export interface SignedManifest<M = Manifest> {
  manifest: M;
  jws: string;
  kid: string;
  publicJwk: JWK;
}

/** The export's last line: the signed manifest. */
export function manifestLine(signed: SignedManifest): string {
  return `${canonicalJson({ type: 'manifest', ...signed })}\n`;
}

/** Parses and checks an export range: ISO 8601 instants, from before to; 400 otherwise. */
export function parseRange(req: ExportRequest): ExportRange {
  const parse = (name: string, v: string | undefined) => {
    if (v === undefined) return undefined;
    const d = new Date(v);
    if (!/^\d{4}-\d{2}-\d{2}(T[\d:.]+(Z|[+-]\d{2}:\d{2}))?$/.test(v) || Number.isNaN(d.getTime())) {
      throw badRequest(
        'INVALID_RANGE',
        `${name} is not an ISO 8601 date or date-time with a zone (e.g. 2026-01-31T00:00:00Z)`,
      );
    }
    return d;
  };
  const from = parse('from', req.from);
  const to = parse('to', req.to);
  if (from && to && from.getTime() > to.getTime()) throw badRequest('INVALID_RANGE', 'from is after to');
  return { from, to, dagId: req.dagId };
}

/**
 * The NDJSON audit export of one tenant. Runs are read page by page in export order, and each
 * run's events page by page, each page in its own short tenant transaction, so memory stays
 * constant whatever the volume (only the per-run chain heads, one entry per run, accumulate for
 * the manifest). Events are read up to the count the run row had when its page was read, so the
 * run record, its events and its chain head always agree.
 */
@Injectable()
export class ExportService {
  constructor(
    private readonly db: Database,
    private readonly repo: ExportRepository,
    private readonly keys: SigningKeys,
    private readonly quotas: QuotaChecks,
  ) {}

  /**
   * Refuses an export larger than the tenant's plan's maxExportBytes (429 QUOTA_EXCEEDED) before
   * any of it is sent. Its size is known only by making it: with the limit, the lines are made once
   * without being sent, stopping as soon as they pass it, then again for the response (runs still
   * running may add a few events between the two); without the limit nothing is made twice.
   */
  async checkSize(tenantId: string, range: ExportRange): Promise<void> {
    const max = await this.quotas.exportLimit(tenantId);
    if (max === null) return;
    const refuse = (bytes: number) =>
      quotaExceeded(
        { limit: 'maxExportBytes', value: max, current: bytes },
        `the export is larger than the plan's maxExportBytes (${max} bytes; at least ${bytes}): export a shorter range (from, to, dagId)`,
      );
    let bytes = 0;
    const lines = this.lines(tenantId, range, { record: false });
    let r = await lines.next();
    while (!r.done) {
      bytes += Buffer.byteLength(r.value, 'utf8');
      if (bytes > max) throw refuse(bytes);
      r = await lines.next();
    }
    bytes += Buffer.byteLength(manifestLine(r.value), 'utf8');
    if (bytes > max) throw refuse(bytes);
  }

  /**
   * Yields NDJSON lines (each ending in a newline); returns the signed manifest once they are all
   * out. With `record` (default), an export whose lines were all taken is recorded (run_export) for
   * retention's requires-export rule.
   */
  lines(tenantId: string, range: ExportRange, opts: { record?: boolean } = {}): AsyncGenerator<string, SignedManifest> {
    return countingFailures('runs', this.make(tenantId, range, opts));
  }

  private async *make(
    tenantId: string,
    range: ExportRange,
    opts: { record?: boolean },
  ): AsyncGenerator<string, SignedManifest> {
    const startedAt = await this.db.withTenant(tenantId, (tx) => this.repo.now(tx));
    let runCount = 0;
    const w = new ExportWriter(tenantId, {
      from: iso(range.from),
      to: iso(range.to),
      dagId: range.dagId ?? null,
    });
    let after: RunKey | undefined;
    for (;;) {
      const page = await this.db.withTenant(tenantId, async (tx) => {
        const runs = await this.repo.runsPage(tx, range, after, RUN_PAGE);
        const ids = runs.map((r) => r.run_id);
        const [steps, attempts, logs, spans] = await Promise.all([
          this.repo.steps(tx, ids),
          this.repo.attempts(tx, ids),
          this.repo.logs(tx, ids),
          this.repo.spans(tx, ids),
        ]);
        return { runs, steps: group(steps), attempts: group(attempts), logs: group(logs), spans: group(spans) };
      });
      for (const run of page.runs) {
        runCount++;
        yield w.line({
          type: 'run',
          tenant: tenantId,
          runId: run.run_id,
          dagId: run.dag_id,
          dagVersion: run.dag_version,
          contentHash: run.content_hash,
          runToken: run.run_token,
          inputs: run.inputs,
          inputsHash: run.inputs_hash,
          outputsHash: run.outputs_hash,
          status: run.status,
          reason: run.reason,
          traceId: run.trace_id,
          requestedBy: run.requested_by,
          replayOf: run.replay_of,
          rerunOf: run.rerun_of,
          rerunFromStep: run.rerun_from_step,
          // Only where they were given (a run without them exports as before).
          ...(run.priority !== DEFAULT_PRIORITY ? { priority: run.priority } : {}),
          ...(run.not_before !== null ? { notBeforeUtc: iso(run.not_before) } : {}),
          // (Only a child run of a `dag` step names its parent.)
          ...(run.parent_run_id ? { parentRunId: run.parent_run_id, parentStepId: run.parent_step_id } : {}),
          createdUtc: iso(run.created_at),
          startedUtc: iso(run.started_utc),
          finishedUtc: iso(run.finished_at),
          stepsTotal: run.steps_total,
          stepsFailed: run.steps_failed,
          eventCount: run.event_seq,
          eventHead: run.event_hash,
        });

        let seq = 0;
        let head = '';
        while (seq < run.event_seq) {
          const events = await this.db.withTenant(tenantId, (tx) =>
            this.repo.events(tx, run.run_id, seq, run.event_seq, EVENT_PAGE),
          );
          if (events.length === 0) break;
          for (const e of events) {
            yield w.line({
              type: 'event',
              runId: run.run_id,
              seq: e.seq,
              createdAt: e.created_at.toISOString(),
              eventType: e.type,
              stepId: e.step_id,
              attempt: e.attempt,
              actor: e.actor,
              data: e.data,
              prevHash: e.prev_hash,
              hash: e.hash,
            });
            seq = e.seq;
            head = e.hash;
          }
        }
        w.chain({ runId: run.run_id, events: seq, head });

        for (const s of page.steps.get(run.run_id) ?? []) {
          yield w.line({
            type: 'step',
            runId: run.run_id,
            stepId: s.step_id,
            status: s.status,
            reason: s.reason,
            plugin: s.plugin,
            config: redactSecrets(s.config),
            dependsOn: s.depends_on,
            topoIndex: s.topo_index,
            dispatchSeq: s.dispatch_seq,
            attempts: s.attempts,
            ...(s.named_status !== null ? { namedStatus: s.named_status } : {}),
            outputsHash: s.outputs_hash,
            logsHash: s.logs_hash,
            error: redactSecrets(s.error),
            fromRerun: s.from_rerun,
            queuedUtc: iso(s.queued_at),
            startedUtc: iso(s.started_at),
            finishedUtc: iso(s.finished_at),
          });
        }
        const attempts = page.attempts.get(run.run_id) ?? [];
        for (const a of attempts) {
          yield w.line({
            type: 'attempt',
            runId: run.run_id,
            stepId: a.step_id,
            attempt: a.attempt,
            epoch: a.epoch,
            workerId: a.worker_id,
            status: a.status,
            traceparent: a.traceparent,
            error: redactSecrets(a.error),
            outputsHash: a.outputs_hash,
            logsHash: a.logs_hash,
            createdUtc: iso(a.created_at),
            queuedUtc: iso(a.queued_at),
            claimedUtc: iso(a.claimed_at),
            conditionPendingUtc: iso(a.condition_pending_at),
            constraintCheckedUtc: iso(a.constraint_checked_at),
            startedUtc: iso(a.started_at),
            finishedUtc: iso(a.finished_at),
            terminatedUtc: iso(a.terminated_at),
          });
        }
        for (const l of page.logs.get(run.run_id) ?? []) {
          yield w.line({
            type: 'log',
            runId: run.run_id,
            stepId: l.step_id,
            attempt: l.attempt,
            sha256: l.sha256,
            mediaType: l.media_type,
            size: l.size,
            body: l.body_json ?? null,
            bodyBase64: l.body_bytes ? l.body_bytes.toString('base64') : null,
          });
        }
        for (const m of runMetrics(run, attempts)) yield w.line(m);
        // The stored spans, the run's span and its attempts' step spans (derived from their rows, see
        // step-spans.ts; stored ones of those names, written before they were derived, are left out),
        // in order of start.
        const plugins = new Map((page.steps.get(run.run_id) ?? []).map((s) => [s.step_id, s.plugin]));
        const ownSpan = runSpan(run, tenantId);
        const spans = [
          ...(page.spans.get(run.run_id) ?? [])
            .filter((s) => !DERIVED_SPANS.has(s.name))
            .map((s) => ({
              traceId: s.trace_id,
              spanId: s.span_id,
              parentSpanId: s.parent_span_id,
              name: s.name,
              kind: s.kind,
              stepId: s.step_id,
              startedAt: s.started_at,
              endedAt: s.ended_at,
              statusCode: s.status_code,
              statusMessage: s.status_message,
              attributes: s.attributes,
            })),
          ...(ownSpan ? [ownSpan] : []),
          ...attempts.flatMap((a) => stepSpan(run, tenantId, plugins.get(a.step_id), a) ?? []),
        ].sort((x, y) => x.startedAt.getTime() - y.startedAt.getTime() || (x.spanId < y.spanId ? -1 : 1));
        for (const s of spans) {
          yield w.line({
            type: 'span',
            runId: run.run_id,
            traceId: s.traceId,
            spanId: s.spanId,
            parentSpanId: s.parentSpanId,
            name: s.name,
            kind: s.kind,
            stepId: s.stepId,
            startedUtc: iso(s.startedAt),
            endedUtc: iso(s.endedAt),
            statusCode: s.statusCode,
            statusMessage: s.statusMessage,
            attributes: redactSecrets(s.attributes),
          });
        }
      }
      if (page.runs.length < RUN_PAGE) break;
      const last = page.runs[page.runs.length - 1];
      after = { startedAt: last.started_utc, dagId: last.dag_id, runId: last.run_id };
    }
    if (opts.record !== false)
      await this.db.withTenant(tenantId, (tx) => this.repo.recordExport(tx, startedAt, range, runCount));
    return this.sign(w.manifest());
  }

  /** Signs the manifest (JWS compact, EdDSA, the instance's active key; kid in the protected header). */
  async sign<M extends object = Manifest>(manifest: M): Promise<SignedManifest<M>> {
    const key = this.keys.active;
    const jws = await new CompactSign(Buffer.from(canonicalJson(manifest), 'utf8'))
      .setProtectedHeader({ alg: 'EdDSA', kid: key.kid, typ: JWS_TYPE })
      .sign(key.privateKey);
    return { manifest, jws, kid: key.kid, publicJwk: { ...key.publicJwk, kid: key.kid, alg: 'EdDSA', use: 'sig' } };
  }
}

function group<T extends { run_id: string | null }>(rows: T[]): Map<string, T[]> {
  const m = new Map<string, T[]>();
  for (const r of rows) {
    if (!r.run_id) continue;
    const list = m.get(r.run_id);
    if (list) list.push(r);
    else m.set(r.run_id, [r]);
  }
  return m;
}

/** Per-run and per-attempt timings, derived from the stored timestamps. */
function runMetrics(
  run: { run_id: string; created_at: Date; started_at: Date | null; finished_at: Date | null },
  attempts: {
    step_id: string;
    attempt: number;
    queued_at: Date | null;
    claimed_at: Date;
    started_at: Date | null;
    finished_at: Date | null;
  }[],
): ExportRecord[] {
  const out: ExportRecord[] = [];
  const metric = (name: string, value: number | null, stepId: string | null = null, attempt: number | null = null) => {
    if (value !== null) out.push({ type: 'metric', runId: run.run_id, stepId, attempt, name, value, unit: 'seconds' });
  };
  metric('run.queued_seconds', seconds(run.created_at, run.started_at));
  metric('run.duration_seconds', seconds(run.started_at, run.finished_at));
  for (const a of attempts) {
    metric('attempt.dispatch_latency_seconds', seconds(a.queued_at, a.claimed_at), a.step_id, a.attempt);
    metric('attempt.execution_seconds', seconds(a.started_at, a.finished_at), a.step_id, a.attempt);
  }
  return out;
}
