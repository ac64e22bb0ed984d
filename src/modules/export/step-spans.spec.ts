import { runSpanId } from '../../core/telemetry/tracing';
import { runSpan, stepSpan, type AttemptForSpan, type RunForSpan } from './step-spans';

describe('stepSpan', () => {
  const run = { run_id: '7b0e0c1e-3a3c-4a53-9d0a-0a4a3c0f4b11', trace_id: 'ab'.repeat(16), dag_id: 'etl' };
  const at = new Date('2026-01-10T01:00:00.000Z');
  const attempt = (over: Partial<AttemptForSpan> = {}): AttemptForSpan => ({
    step_id: 'load',
    attempt: 2,
    status: 'succeeded',
    traceparent: `00-${run.trace_id}-${'c'.repeat(16)}-01`,
    started_at: at,
    finished_at: new Date(at.getTime() + 50),
    terminated_at: new Date(at.getTime() + 60),
    ...over,
  });

  it("is the span the attempt ran in: its traceparent's id, the run span as parent, the plugin's start and end", () => {
    expect(stepSpan(run, 't1', 'http', attempt())).toEqual({
      traceId: run.trace_id,
      spanId: 'c'.repeat(16),
      parentSpanId: runSpanId(run.run_id),
      name: 'orchestrator.step',
      kind: 0,
      stepId: 'load',
      startedAt: at,
      endedAt: new Date(at.getTime() + 50),
      statusCode: 1,
      statusMessage: null,
      attributes: {
        tenant: 't1',
        dagId: 'etl',
        runId: run.run_id,
        stepId: 'load',
        attempt: 2,
        plugin: 'http',
        status: 'succeeded',
      },
    });
  });

  it('marks a failed attempt as an error and leaves other outcomes unset', () => {
    expect(stepSpan(run, 't1', 'noop', attempt({ status: 'failed' }))).toMatchObject({
      statusCode: 2,
      statusMessage: 'step failed',
    });
    expect(stepSpan(run, 't1', 'noop', attempt({ status: 'orphaned', finished_at: null }))).toMatchObject({
      statusCode: 0,
      endedAt: new Date(at.getTime() + 60),
    });
  });

  it('has none for an attempt that never started or ran on another trace', () => {
    expect(stepSpan(run, 't1', 'noop', attempt({ started_at: null }))).toBeNull();
    expect(
      stepSpan(run, 't1', 'noop', attempt({ traceparent: `00-${'ef'.repeat(16)}-${'c'.repeat(16)}-01` })),
    ).toBeNull();
  });
});

describe('runSpan', () => {
  const ended: RunForSpan = {
    run_id: '7b0e0c1e-3a3c-4a53-9d0a-0a4a3c0f4b11',
    trace_id: 'ab'.repeat(16),
    dag_id: 'etl',
    status: 'failed',
    reason: 'a step failed',
    created_at: new Date('2026-01-10T00:59:59.000Z'),
    started_at: new Date('2026-01-10T01:00:00.000Z'),
    finished_at: new Date('2026-01-10T01:00:05.000Z'),
  };

  it("is the root of the run's trace: the derived run span id, the run's start and end, its outcome", () => {
    expect(runSpan(ended, 't1')).toEqual({
      traceId: ended.trace_id,
      spanId: runSpanId(ended.run_id),
      parentSpanId: null,
      name: 'orchestrator.run',
      kind: 0,
      stepId: null,
      startedAt: ended.started_at,
      endedAt: ended.finished_at,
      statusCode: 2,
      statusMessage: 'a step failed',
      attributes: { tenant: 't1', dagId: 'etl', runId: ended.run_id, status: 'failed', reason: 'a step failed' },
    });
  });

  it('starts at the creation of a run that never started, and is absent for a run that has not ended', () => {
    expect(runSpan({ ...ended, status: 'cancelled', reason: null, started_at: null }, 't1')).toMatchObject({
      startedAt: ended.created_at,
      statusCode: 0,
      statusMessage: null,
      attributes: { status: 'cancelled' },
    });
    expect(runSpan({ ...ended, status: 'running', finished_at: null }, 't1')).toBeNull();
  });
});
