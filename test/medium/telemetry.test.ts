import { randomUUID } from 'node:crypto';
import pino from 'pino';
import { attachSpanProcessor, recordRunSpan, withChildSpan, withStepSpan } from '../../src/core/telemetry/tracing';
import { ObservabilityRepository } from '../../src/modules/observability/observability.repository';
import { SpanStore } from '../../src/modules/observability/span-store';
import { createTestDatabase, type TestDatabase } from '../support/test-database';

describe('span store', () => {
  let t: TestDatabase;
  let store: SpanStore;
  let detach: () => void;

  beforeAll(async () => {
    t = await createTestDatabase();
    await t.db.system
      .insertInto('tenant')
      .values([
        { id: 'span-a', name: 'a' },
        { id: 'span-b', name: 'b' },
      ])
      .execute();
    store = new SpanStore(t.db.system, new ObservabilityRepository(), pino({ level: 'silent' }));
    detach = attachSpanProcessor(store);
  });
  afterAll(async () => {
    detach();
    await t.drop();
  });

  it("stores a run's plugin spans under its tenant, readable only by that tenant, and not its step and run spans (derived at export)", async () => {
    const runId = randomUUID();
    const traceId = 'cd'.repeat(16);
    const attrs = { tenant: 'span-a', dagId: 'etl', runId, traceId };
    let stepSpanId = '';
    await withStepSpan({ ...attrs, stepId: 'fetch', attempt: 1 }, async (o) => {
      stepSpanId = o.span.spanContext().spanId;
      await withChildSpan(
        'orchestrator.plugin',
        { plugin: 'http', 'http.url': 'https://example.test', authorization: 'Bearer abc' },
        async () => undefined,
      );
      o.setStatus('succeeded');
    });
    recordRunSpan({ ...attrs, status: 'succeeded' }, new Date(Date.now() - 1000), new Date());
    // A span outside tenant work is not stored.
    await withChildSpan('housekeeping', {}, async () => undefined);
    await store.flush();

    const rows = await t.db.withTenant('span-a', (tx) =>
      tx.selectFrom('span').selectAll().where('tenant_id', '=', 'span-a').orderBy('name').execute(),
    );
    expect(rows.map((r) => [r.name, r.run_id, r.step_id, r.trace_id])).toEqual([
      ['orchestrator.plugin', runId, 'fetch', traceId],
    ]);
    const call = rows.find((r) => r.name === 'orchestrator.plugin')!;
    expect(call.parent_span_id).toBe(stepSpanId);
    expect(JSON.stringify(rows)).not.toContain('Bearer abc');

    const other = await t.db.withTenant('span-b', (tx) => tx.selectFrom('span').selectAll().execute());
    expect(other).toEqual([]);
    const all = await t.db.system.selectFrom('span').select('name').execute();
    expect(all.map((r) => r.name)).not.toContain('housekeeping');
  });

  it('stores a batch that meets spans already stored: the new ones once, the stored ones left as they are', async () => {
    const repo = new ObservabilityRepository();
    const runId = randomUUID();
    const span = (spanId: string, name: string) => ({
      tenantId: 'span-a',
      traceId: 'ef'.repeat(16),
      spanId,
      parentSpanId: null,
      name,
      kind: 0,
      runId,
      stepId: 'x',
      startedAt: new Date('2026-01-01T00:00:00Z'),
      endedAt: new Date('2026-01-01T00:00:01Z'),
      statusCode: 1,
      statusMessage: null,
      attributes: {},
    });
    await repo.insertSpans(t.db.system, [span('1'.repeat(16), 'first')]);
    // Sent again (a lost commit) with one more span.
    await repo.insertSpans(t.db.system, [span('1'.repeat(16), 'again'), span('2'.repeat(16), 'second')]);
    const rows = await t.db.system
      .selectFrom('span')
      .select(['span_id', 'name'])
      .where('run_id', '=', runId)
      .orderBy('span_id')
      .execute();
    expect(rows).toEqual([
      { span_id: '1'.repeat(16), name: 'first' },
      { span_id: '2'.repeat(16), name: 'second' },
    ]);
  });
});
