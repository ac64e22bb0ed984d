import { SpanKind, SpanStatusCode } from '@opentelemetry/api';
import { isTraceId, RUN_SPAN, runSpanId, STEP_SPAN, traceparentIds } from '../../core/telemetry/tracing';

/** What an attempt row says of the attempt (export columns). */
export interface AttemptForSpan {
  step_id: string;
  attempt: number;
  status: string;
  traceparent: string;
  started_at: Date | null;
  finished_at: Date | null;
  terminated_at: Date | null;
}

/** What a run row says of the run (export columns). */
export interface RunForSpan {
  run_id: string;
  trace_id: string;
  dag_id: string;
  status: string;
  reason: string | null;
  created_at: Date;
  started_at: Date | null;
  finished_at: Date | null;
}

/** A span the export derives from a row (`orchestrator.step` or `orchestrator.run`), as it writes a span. */
export interface DerivedSpan {
  traceId: string;
  spanId: string;
  parentSpanId: string | null;
  name: string;
  kind: number;
  stepId: string | null;
  startedAt: Date;
  endedAt: Date;
  statusCode: number;
  statusMessage: string | null;
  attributes: Record<string, string | number>;
}

/** A derived span's status code for the outcome of its attempt or run, as the live spans set it. */
function statusCodeOf(status: string): SpanStatusCode {
  if (status === 'succeeded') return SpanStatusCode.OK;
  if (status === 'failed') return SpanStatusCode.ERROR;
  return SpanStatusCode.UNSET;
}

/**
 * The `orchestrator.step` span of an attempt that ran, from its row: the worker ran the attempt in a
 * span whose id is the attempt's stored traceparent's, child of the run span (runSpanId), from the
 * plugin's start to its end, with the attempt's outcome as its status. These spans are not stored
 * (one row per step, all of it in the attempt row already); the export derives them. Null for an
 * attempt that never started, or whose traceparent is not on the run's trace.
 */
export function stepSpan(
  run: { run_id: string; trace_id: string; dag_id: string },
  tenant: string,
  plugin: string | undefined,
  a: AttemptForSpan,
): DerivedSpan | null {
  const tp = traceparentIds(a.traceparent);
  if (!tp || tp.traceId !== run.trace_id || !a.started_at) return null;
  const ended = a.finished_at ?? a.terminated_at ?? a.started_at;
  return {
    traceId: run.trace_id,
    spanId: tp.spanId,
    parentSpanId: runSpanId(run.run_id),
    name: STEP_SPAN,
    kind: SpanKind.INTERNAL,
    stepId: a.step_id,
    startedAt: a.started_at,
    endedAt: ended < a.started_at ? a.started_at : ended,
    statusCode: statusCodeOf(a.status),
    statusMessage: a.status === 'failed' ? 'step failed' : null,
    attributes: {
      tenant,
      dagId: run.dag_id,
      runId: run.run_id,
      stepId: a.step_id,
      attempt: a.attempt,
      ...(plugin ? { plugin } : {}),
      status: a.status,
    },
  };
}

/**
 * The `orchestrator.run` span of a run that ended, from its row: the root of the run's trace, its
 * id derived from the run id (runSpanId, which its step spans name as their parent), from the run's
 * start (its creation if it never started) to its end, with its outcome as its status. Not stored
 * either (see stepSpan). Null for a run that has not ended or whose trace id is malformed.
 */
export function runSpan(run: RunForSpan, tenant: string): DerivedSpan | null {
  if (!run.finished_at || !isTraceId(run.trace_id)) return null;
  const started = run.started_at ?? run.created_at;
  return {
    traceId: run.trace_id,
    spanId: runSpanId(run.run_id),
    parentSpanId: null,
    name: RUN_SPAN,
    kind: SpanKind.INTERNAL,
    stepId: null,
    startedAt: started,
    endedAt: run.finished_at < started ? started : run.finished_at,
    statusCode: statusCodeOf(run.status),
    statusMessage: run.status === 'failed' ? (run.reason ?? 'failed') : null,
    attributes: {
      tenant,
      dagId: run.dag_id,
      runId: run.run_id,
      status: run.status,
      ...(run.reason ? { reason: run.reason } : {}),
    },
  };
}
