import type { ReadableSpan, SpanProcessor } from '@opentelemetry/sdk-trace-base';
import { currentLogContext } from '../logging/log-context';
import {
  attachSpanProcessor,
  currentTraceparent,
  recordRunSpan,
  runSpanId,
  runTraceparent,
  safeAttributes,
  withChildSpan,
  withStepSpan,
} from './tracing';

function collector(): { spans: ReadableSpan[]; detach: () => void } {
  const spans: ReadableSpan[] = [];
  const p: SpanProcessor = {
    onStart: () => undefined,
    onEnd: (s) => spans.push(s),
    forceFlush: async () => undefined,
    shutdown: async () => undefined,
  };
  return { spans, detach: attachSpanProcessor(p) };
}

const base = { tenant: 'acme', dagId: 'etl', runId: '7b0e0c1e-3a3c-4a53-9d0a-0a4a3c0f4b11', traceId: 'ab'.repeat(16) };

describe('tracing', () => {
  it('keeps one trace id per run across attempts, parents steps on the run span and gives them the attempt traceparent span id', async () => {
    const c = collector();
    const tp1 = `00-${base.traceId}-${'1'.repeat(16)}-01`;
    const tp2 = `00-${base.traceId}-${'2'.repeat(16)}-01`;
    let inside: string | undefined;
    await withStepSpan({ ...base, stepId: 'extract', attempt: 1, traceparent: tp1 }, async (o) => {
      inside = currentTraceparent();
      o.setStatus('retrying');
    });
    await withStepSpan({ ...base, stepId: 'extract', attempt: 2, traceparent: tp2 }, async (o) => {
      await withChildSpan('orchestrator.plugin', { plugin: 'http', authorization: 'Bearer x' }, async () => undefined);
      o.setStatus('succeeded');
    });
    // A traceparent of another trace is not adopted.
    await withStepSpan(
      { ...base, stepId: 'load', attempt: 1, traceparent: `00-${'cd'.repeat(16)}-${'3'.repeat(16)}-01` },
      async () => undefined,
    );
    recordRunSpan({ ...base, status: 'succeeded' }, new Date(Date.now() - 1000), new Date());
    c.detach();

    expect(c.spans.map((s) => s.name)).toEqual([
      'orchestrator.step',
      'orchestrator.plugin',
      'orchestrator.step',
      'orchestrator.step',
      'orchestrator.run',
    ]);
    for (const s of c.spans) expect(s.spanContext().traceId).toBe(base.traceId);
    const [first, plugin, second, third, run] = c.spans;
    expect(inside).toBe(tp1);
    expect(first.spanContext().spanId).toBe('1'.repeat(16));
    expect(second.spanContext().spanId).toBe('2'.repeat(16));
    expect(third.spanContext().spanId).not.toBe('3'.repeat(16));
    expect(run.spanContext().spanId).toBe(runSpanId(base.runId));
    expect(run.parentSpanContext).toBeUndefined();
    for (const s of [first, second, third]) expect(s.parentSpanContext?.spanId).toBe(runSpanId(base.runId));
    expect(plugin.parentSpanContext?.spanId).toBe(second.spanContext().spanId);
    expect(plugin.attributes.authorization).toBeUndefined();
    expect(first.attributes).toMatchObject({
      tenant: 'acme',
      dagId: 'etl',
      runId: base.runId,
      stepId: 'extract',
      attempt: 1,
      status: 'retrying',
    });
    expect(second.attributes.status).toBe('succeeded');
  });

  it('sets the log context inside a step span', async () => {
    await withStepSpan({ ...base, stepId: 's1', attempt: 1 }, async () => {
      expect(currentLogContext()).toEqual({
        trace_id: base.traceId,
        tenant: 'acme',
        dagId: 'etl',
        runId: base.runId,
        stepId: 's1',
      });
    });
  });

  it('marks a step span failed when the attempt throws', async () => {
    const c = collector();
    await expect(
      withStepSpan({ ...base, stepId: 's1', attempt: 1 }, async () => Promise.reject(new Error('boom'))),
    ).rejects.toThrow('boom');
    c.detach();
    expect(c.spans[0].attributes.status).toBe('failed');
    expect(c.spans[0].status.code).toBe(2);
  });

  it('records no step or run span when every processor takes none and nothing is exported, and still parents plugin calls and log fields on the step span ids', async () => {
    const blind: ReadableSpan[] = [];
    const detach = attachSpanProcessor({
      derivedSpans: false,
      onStart: () => undefined,
      onEnd: (s: ReadableSpan) => blind.push(s),
      forceFlush: async () => undefined,
      shutdown: async () => undefined,
    } as SpanProcessor & { derivedSpans: false });
    const tp = `00-${base.traceId}-${'4'.repeat(16)}-01`;
    let inside: string | undefined;
    let fields: unknown;
    try {
      await withStepSpan({ ...base, stepId: 'load', attempt: 1, traceparent: tp }, async (o) => {
        inside = currentTraceparent();
        fields = currentLogContext();
        await withChildSpan('orchestrator.plugin', { plugin: 'http' }, async () => undefined);
        o.setStatus('succeeded');
      });
      recordRunSpan({ ...base, status: 'succeeded' }, new Date(Date.now() - 1000), new Date());
    } finally {
      detach();
    }
    expect(inside).toBe(tp);
    expect(fields).toMatchObject({ trace_id: base.traceId, runId: base.runId, stepId: 'load' });
    expect(blind.map((s) => s.name)).toEqual(['orchestrator.plugin']);
    expect(blind[0].parentSpanContext?.spanId).toBe('4'.repeat(16));
    expect(blind[0].spanContext().traceId).toBe(base.traceId);
  });

  it('builds a traceparent naming the run span', () => {
    expect(runTraceparent(base.traceId, base.runId)).toBe(`00-${base.traceId}-${runSpanId(base.runId)}-01`);
  });

  it('drops attributes named like credentials', () => {
    expect(safeAttributes({ tenant: 't', apiKey: 'k', client_secret: 's', password: 'p', n: 1, x: undefined })).toEqual(
      { tenant: 't', n: 1 },
    );
  });
});
