import {
  context,
  propagation,
  ROOT_CONTEXT,
  SpanStatusCode,
  trace,
  TraceFlags,
  type Attributes,
  type Context,
  type Span,
  type Tracer,
} from '@opentelemetry/api';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { NodeSDK } from '@opentelemetry/sdk-node';
import {
  AlwaysOnSampler,
  BatchSpanProcessor,
  RandomIdGenerator,
  type IdGenerator,
  type ReadableSpan,
  type Span as SdkSpan,
  type SpanProcessor,
} from '@opentelemetry/sdk-trace-base';
import { createHash, randomBytes } from 'node:crypto';
import { withLogFields, type LogContext } from '../logging/log-context';

const TRACE_ID = /^[0-9a-f]{32}$/;
const SPAN_ID = /^[0-9a-f]{16}$/;
const TRACEPARENT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;

/** Attribute names whose values never reach a span (stored or exported). */
const SECRET_ATTRIBUTE = /authorization|token|secret|password|passwd|cookie|api[-_]?key|private[-_]?key|credential/i;

// Ids the next span must take (set synchronously around one startSpan call): the run span's
// trace id is the run's stored trace id, and its span id is derived from the run id so step spans
// started in any process can name it as their parent before it is recorded.
let forcedIds: { traceId?: string; spanId: string } | undefined;

class OrdoIdGenerator implements IdGenerator {
  private readonly random = new RandomIdGenerator();
  generateTraceId(): string {
    return forcedIds?.traceId ?? this.random.generateTraceId();
  }
  generateSpanId(): string {
    return forcedIds?.spanId ?? this.random.generateSpanId();
  }
}

/** Fans spans out to processors attached at run time (the database span store of each process). */
class AttachedProcessors implements SpanProcessor {
  readonly processors = new Set<SpanProcessor>();
  onStart(span: SdkSpan, parent: Context): void {
    for (const p of this.processors) p.onStart(span, parent);
  }
  onEnd(span: ReadableSpan): void {
    for (const p of this.processors) p.onEnd(span);
  }
  async forceFlush(): Promise<void> {
    await Promise.all([...this.processors].map((p) => p.forceFlush()));
  }
  async shutdown(): Promise<void> {
    await Promise.all([...this.processors].map((p) => p.shutdown()));
  }
}

const attached = new AttachedProcessors();
let sdk: NodeSDK | undefined;
/** Whether spans go out over OTLP (set by startTelemetry). */
let exporting = false;

/**
 * A processor that takes no spans the export derives from rows: `orchestrator.step` (from the
 * attempt) and `orchestrator.run` (from the run). The span store is one.
 */
export interface WithoutDerivedSpans {
  readonly derivedSpans: false;
}

/**
 * Whether a step's or a run's span is recorded: when spans go out over OTLP or a processor
 * attached takes them. Otherwise a step runs under a span context of the same ids that records
 * nothing (its children, the plugin calls, still name it as their parent), and a run's end
 * records no span.
 */
function derivedSpansWanted(): boolean {
  startTelemetry();
  if (exporting) return true;
  for (const p of attached.processors) if ((p as Partial<WithoutDerivedSpans>).derivedSpans !== false) return true;
  return false;
}

/**
 * Starts the OpenTelemetry SDK once per process (idempotent): every span is recorded (sampler
 * always on) and handed to the attached processors; OTLP/HTTP export is added only when the
 * configuration names OTEL_EXPORTER_OTLP_ENDPOINT. The first call decides: startOrdo makes it with
 * the configuration before any span starts; spans started without it (unit tests) are not exported.
 * No metrics or logs go through OTel (Prometheus and pino do that).
 */
export function startTelemetry(config: { OTEL_EXPORTER_OTLP_ENDPOINT?: string } = {}): void {
  if (sdk) return;
  const processors: SpanProcessor[] = [attached];
  const endpoint = config.OTEL_EXPORTER_OTLP_ENDPOINT;
  exporting = Boolean(endpoint);
  if (endpoint) {
    processors.push(
      new BatchSpanProcessor(new OTLPTraceExporter({ url: `${endpoint.replace(/\/+$/, '')}/v1/traces` })),
    );
  }
  sdk = new NodeSDK({
    resource: resourceFromAttributes({ 'service.name': 'ordo' }),
    autoDetectResources: false,
    sampler: new AlwaysOnSampler(),
    idGenerator: new OrdoIdGenerator(),
    spanProcessors: processors,
    metricReaders: [],
    logRecordProcessors: [],
    instrumentations: [],
  });
  sdk.start();
}

/** Flushes and stops the SDK (OTLP exporter included); spans started afterwards are not recorded. */
export async function stopTelemetry(): Promise<void> {
  const s = sdk;
  sdk = undefined;
  exporting = false;
  await s?.shutdown();
}

/** Adds a processor (e.g. the span store) for spans ended from now on; returns its detacher. */
export function attachSpanProcessor(p: SpanProcessor): () => void {
  startTelemetry();
  attached.processors.add(p);
  return () => {
    attached.processors.delete(p);
  };
}

export function tracer(): Tracer {
  startTelemetry();
  return trace.getTracer('ordo');
}

/** The name of the span an attempt of a step runs in. */
export const STEP_SPAN = 'orchestrator.step';
/** The name of a run's span, recorded when the run ends. */
export const RUN_SPAN = 'orchestrator.run';
/**
 * The spans the export derives from rows (the attempt's, the run's): never stored, and a stored
 * span of these names (written by an earlier version) is left out of the export.
 */
export const DERIVED_SPANS: ReadonlySet<string> = new Set([STEP_SPAN, RUN_SPAN]);

/**
 * Run span ids computed lately (the steps of a run ask for the same one), at most RUN_SPAN_IDS;
 * replaced when full, not cleared (a cleared Map links its old table to the new one: see SlotTable).
 */
let runSpanIds = new Map<string, string>();
const RUN_SPAN_IDS = 4_096;

/** The run span's id: derived from the run id, so every process computes the same parent. */
export function runSpanId(runId: string): string {
  let id = runSpanIds.get(runId);
  if (id !== undefined) return id;
  id = createHash('sha256').update(`run:${runId}`).digest('hex').slice(0, 16);
  if (id === '0'.repeat(16)) id = '0000000000000001';
  if (runSpanIds.size >= RUN_SPAN_IDS) runSpanIds = new Map();
  runSpanIds.set(runId, id);
  return id;
}

/** A context whose (remote) parent is the run span: trace id = the run's stored trace id. */
export function runParentContext(traceId: string, runId: string): Context {
  if (!TRACE_ID.test(traceId)) return ROOT_CONTEXT;
  return trace.setSpanContext(ROOT_CONTEXT, {
    traceId,
    spanId: runSpanId(runId),
    traceFlags: TraceFlags.SAMPLED,
    isRemote: true,
  });
}

/** A W3C traceparent naming the run span, for queue payloads written before any step span exists. */
export function runTraceparent(traceId: string, runId: string): string {
  return `00-${traceId}-${runSpanId(runId)}-01`;
}

/** The context a W3C traceparent describes, or undefined when it is malformed. */
export function contextFromTraceparent(traceparent: string | undefined | null): Context | undefined {
  if (!traceparent) return undefined;
  const m = TRACEPARENT.exec(traceparent);
  if (!m || m[1] === '0'.repeat(32) || m[2] === '0'.repeat(16)) return undefined;
  return propagation.extract(ROOT_CONTEXT, { traceparent });
}

/** The traceparent of the active span (for queue payloads, retries and outgoing HTTP calls). */
export function currentTraceparent(ctx: Context = context.active()): string | undefined {
  const carrier: Record<string, string> = {};
  propagation.inject(ctx, carrier);
  return carrier.traceparent;
}

/** Adds `traceparent` (and `tracestate`) of the active span to outgoing HTTP headers. */
export function injectTraceHeaders(
  headers: Record<string, string>,
  ctx: Context = context.active(),
): Record<string, string> {
  propagation.inject(ctx, headers);
  return headers;
}

/** Drops attributes whose name suggests a credential, and undefined values. */
export function safeAttributes(attrs: Record<string, unknown>): Attributes {
  const out: Attributes = {};
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || SECRET_ATTRIBUTE.test(k)) continue;
    if (typeof v === 'string' || typeof v === 'number' || typeof v === 'boolean') out[k] = v;
  }
  return out;
}

export interface RunSpanAttributes {
  tenant: string;
  dagId: string;
  runId: string;
  /** The run's stored trace id (32 hex). */
  traceId: string;
  status: string;
}

/**
 * Records the `orchestrator.run` span once a run ends: trace id = the run's, span id = runSpanId(runId)
 * (the parent every step span already names), start and end = the run's own timestamps.
 */
export function recordRunSpan(
  attrs: RunSpanAttributes,
  startedAt: Date,
  finishedAt: Date,
  reason?: string | null,
): void {
  if (!TRACE_ID.test(attrs.traceId) || !derivedSpansWanted()) return;
  const t = tracer();
  forcedIds = { traceId: attrs.traceId, spanId: runSpanId(attrs.runId) };
  let span: Span;
  try {
    span = t.startSpan(
      RUN_SPAN,
      {
        startTime: startedAt,
        root: true,
        attributes: safeAttributes({
          tenant: attrs.tenant,
          dagId: attrs.dagId,
          runId: attrs.runId,
          status: attrs.status,
          reason,
        }),
      },
      ROOT_CONTEXT,
    );
  } finally {
    forcedIds = undefined;
  }
  if (attrs.status === 'failed') span.setStatus({ code: SpanStatusCode.ERROR, message: reason ?? 'failed' });
  else if (attrs.status === 'succeeded') span.setStatus({ code: SpanStatusCode.OK });
  span.end(finishedAt < startedAt ? startedAt : finishedAt);
}

export interface StepSpanAttributes {
  tenant: string;
  dagId: string;
  runId: string;
  stepId: string;
  attempt: number;
  /** The run's trace id; every step span is a child of the run span. */
  traceId: string;
  /**
   * The attempt's traceparent (stored with the attempt, carried by its queue payload): when it
   * belongs to the run's trace, the step span takes its span id, so the stored traceparent names
   * the very span that executed the attempt.
   */
  traceparent?: string | null;
  plugin?: string;
}

/** What the step callback tells the span about its outcome. */
export interface SpanOutcome {
  /** Step status after this attempt (succeeded, failed, retrying, cancelled, ...). */
  setStatus(status: string): void;
  span: Span;
}

/**
 * Runs one attempt of a step inside an `orchestrator.step` span (child of the run span, same trace
 * id on every attempt and in every process) and inside the matching log context, so log lines
 * written by `fn` carry trace_id, tenant, dagId, runId and stepId. A thrown error marks the span
 * failed and is rethrown.
 */
export async function withStepSpan<T>(attrs: StepSpanAttributes, fn: (outcome: SpanOutcome) => Promise<T>): Promise<T> {
  const carried = attrs.traceparent ? TRACEPARENT.exec(attrs.traceparent) : null;
  const traceId = TRACE_ID.test(attrs.traceId) ? attrs.traceId : (carried?.[1] ?? attrs.traceId);
  const parent = runParentContext(traceId, attrs.runId);
  const ownId = carried && carried[1] === traceId && carried[2] !== '0'.repeat(16) ? carried[2] : undefined;
  let span: Span;
  if (TRACE_ID.test(traceId) && !derivedSpansWanted()) {
    span = trace.wrapSpanContext({
      traceId,
      spanId: ownId ?? randomBytes(8).toString('hex'),
      traceFlags: TraceFlags.SAMPLED,
    });
    return runInStepSpan(span, parent, attrs, fn);
  }
  if (ownId) forcedIds = { spanId: ownId };
  try {
    span = tracer().startSpan(
      STEP_SPAN,
      {
        attributes: safeAttributes({
          tenant: attrs.tenant,
          dagId: attrs.dagId,
          runId: attrs.runId,
          stepId: attrs.stepId,
          attempt: attrs.attempt,
          plugin: attrs.plugin,
        }),
      },
      parent,
    );
  } finally {
    forcedIds = undefined;
  }
  return runInStepSpan(span, parent, attrs, fn);
}

/** Runs `fn` in the context of a step's span `span` (recording or not) and its log fields. */
async function runInStepSpan<T>(
  span: Span,
  parent: Context,
  attrs: StepSpanAttributes,
  fn: (outcome: SpanOutcome) => Promise<T>,
): Promise<T> {
  const outcome: SpanOutcome = {
    span,
    setStatus(status) {
      span.setAttribute('status', status);
      if (status === 'failed') span.setStatus({ code: SpanStatusCode.ERROR, message: 'step failed' });
      else if (status === 'succeeded') span.setStatus({ code: SpanStatusCode.OK });
    },
  };
  const log: LogContext = {
    trace_id: span.spanContext().traceId,
    tenant: attrs.tenant,
    dagId: attrs.dagId,
    runId: attrs.runId,
    stepId: attrs.stepId,
  };
  try {
    return await context.with(withLogFields(trace.setSpan(parent, span), log), () => fn(outcome));
  } catch (e) {
    span.setAttribute('status', 'failed');
    span.setStatus({ code: SpanStatusCode.ERROR, message: e instanceof Error ? e.name : 'error' });
    throw e;
  } finally {
    span.end();
  }
}

/**
 * Runs a plugin call (or any unit of work inside a step) in a child span of the active span.
 * `attrs` pass through safeAttributes: nothing named like a credential is recorded.
 */
export async function withChildSpan<T>(
  name: string,
  attrs: Record<string, unknown>,
  fn: (span: Span) => Promise<T>,
): Promise<T> {
  const span = tracer().startSpan(name, { attributes: safeAttributes(attrs) });
  try {
    return await context.with(trace.setSpan(context.active(), span), () => fn(span));
  } catch (e) {
    span.setStatus({ code: SpanStatusCode.ERROR, message: e instanceof Error ? e.name : 'error' });
    throw e;
  } finally {
    span.end();
  }
}

/** The trace and span ids of a well-formed W3C traceparent (version 00), or null. */
export function traceparentIds(traceparent: string): { traceId: string; spanId: string } | null {
  const m = TRACEPARENT.exec(traceparent);
  return m ? { traceId: m[1], spanId: m[2] } : null;
}

/** Whether `s` is a 32-hex W3C trace id. */
export function isTraceId(s: string): boolean {
  return TRACE_ID.test(s);
}

export function isSpanId(s: string): boolean {
  return SPAN_ID.test(s);
}
