import { trace, type Context } from '@opentelemetry/api';
import type { ReadableSpan, Span, SpanProcessor } from '@opentelemetry/sdk-trace-base';
import type { Logger } from 'pino';
import { logFieldsOf } from '../../core/logging/log-context';
import type { SystemDb } from '../../core/database/handles';
import { metrics } from '../../core/telemetry/metrics';
import { DERIVED_SPANS, safeAttributes, type WithoutDerivedSpans } from '../../core/telemetry/tracing';
import type { ObservabilityRepository, StoredSpan } from './observability.repository';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

interface Owner {
  tenant: string;
  runId?: string;
  stepId?: string;
}

/** Nanosecond-precision HrTime to a Date (the database keeps microseconds). */
function toDate(t: [number, number]): Date {
  return new Date(t[0] * 1000 + t[1] / 1e6);
}

/**
 * A SpanProcessor that stores finished spans of tenant work (spans with a `tenant` attribute, or
 * children of one) in the span table, batched: one insert per flush, at most every `intervalMs`
 * or when `batchSize` spans wait. The buffer is bounded; spans beyond it are counted and dropped.
 * Step and run spans (`orchestrator.step`, `orchestrator.run`) are not stored: the attempt's and
 * the run's rows hold all of them, and the export derives them from there (step-spans.ts).
 */
export class SpanStore implements SpanProcessor, WithoutDerivedSpans {
  readonly derivedSpans = false as const;
  private buffer: StoredSpan[] = [];
  private readonly owners = new WeakMap<object, Owner>();
  private timer?: NodeJS.Timeout;
  private flushing?: Promise<void>;

  constructor(
    private readonly db: SystemDb,
    private readonly repo: ObservabilityRepository,
    private readonly log: Logger,
    private readonly opts = { batchSize: 256, intervalMs: 1000, maxBuffered: 10_000 },
  ) {}

  onStart(span: Span, parent: Context): void {
    // The owner of the parent span, or else of the step whose context this is (a step's span is
    // not recorded unless exported: its context carries its log fields).
    const p = trace.getSpan(parent) as unknown as object | undefined;
    const inherited = (p ? this.owners.get(p) : undefined) ?? logFieldsOf(parent);
    const a = span.attributes;
    const tenant = typeof a.tenant === 'string' ? a.tenant : inherited?.tenant;
    if (!tenant) return;
    this.owners.set(span, {
      tenant,
      runId: typeof a.runId === 'string' ? a.runId : inherited?.runId,
      stepId: typeof a.stepId === 'string' ? a.stepId : inherited?.stepId,
    });
  }

  onEnd(span: ReadableSpan): void {
    if (DERIVED_SPANS.has(span.name)) return;
    const a = span.attributes;
    const owner = this.owners.get(span) ?? (typeof a.tenant === 'string' ? { tenant: a.tenant } : undefined);
    if (!owner) return;
    if (this.buffer.length >= this.opts.maxBuffered) {
      metrics.spansDroppedTotal.inc();
      return;
    }
    const ctx = span.spanContext();
    const runId = typeof a.runId === 'string' ? a.runId : owner.runId;
    this.buffer.push({
      tenantId: owner.tenant,
      traceId: ctx.traceId,
      spanId: ctx.spanId,
      parentSpanId: span.parentSpanContext?.spanId ?? null,
      name: span.name,
      kind: span.kind,
      runId: runId && UUID.test(runId) ? runId : null,
      stepId: typeof a.stepId === 'string' ? a.stepId : (owner.stepId ?? null),
      startedAt: toDate(span.startTime),
      endedAt: toDate(span.endTime),
      statusCode: span.status.code,
      statusMessage: span.status.message ?? null,
      attributes: safeAttributes(a),
    });
    if (this.buffer.length >= this.opts.batchSize) void this.flush();
    else this.timer ??= setTimeout(() => void this.flush(), this.opts.intervalMs).unref();
  }

  /** Writes what is buffered now (one statement). */
  async flush(): Promise<void> {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    await this.flushing;
    const batch = this.buffer;
    if (batch.length === 0) return;
    this.buffer = [];
    this.flushing = this.repo.insertSpans(this.db, batch).catch((e: unknown) => {
      metrics.spansDroppedTotal.inc(batch.length);
      this.log.warn({ err: e, spans: batch.length }, 'span store insert failed');
    });
    await this.flushing;
  }

  async forceFlush(): Promise<void> {
    await this.flush();
  }

  async shutdown(): Promise<void> {
    await this.flush();
  }
}
