import { registry } from '../../core/telemetry/metrics';
import { LimitHitsTally, queueMetrics, setQueueGauges, topTenants } from './queue-metrics';

const values = async (name: string) =>
  Object.fromEntries(
    ((await registry.getSingleMetric(name)?.get())?.values ?? []).map((v) => [JSON.stringify(v.labels), v.value]),
  );

describe('per-tenant metrics with top N tenants plus other', () => {
  beforeEach(() => {
    queueMetrics.limitHits.reset();
  });

  it('picks the top tenants by score, ties by id, never one named other', () => {
    const items: [string, number][] = [
      ['b', 2],
      ['a', 2],
      ['other', 9],
      ['c', 1],
    ];
    expect([
      ...topTenants(
        items,
        2,
        ([t]) => t,
        ([, n]) => n,
      ),
    ]).toEqual(['a', 'b']);
  });

  it('sums the rest of the queues as other, with the oldest age among them', async () => {
    setQueueGauges(
      [
        { tenant: 'x', depth: 1, oldestSeconds: 50 },
        { tenant: 'y', depth: 9, oldestSeconds: 2 },
        { tenant: 'z', depth: 3, oldestSeconds: 7 },
      ],
      1,
    );
    expect(await values('orchestrator_queue_depth')).toEqual({ '{"tenant":"y"}': 9, '{"tenant":"other"}': 4 });
    expect(await values('orchestrator_oldest_ready_seconds')).toEqual({
      '{"tenant":"y"}': 2,
      '{"tenant":"other"}': 50,
    });
  });

  it('adds only what grew since the last reading, and stops reading settled minutes', async () => {
    const start = new Date('2026-11-27T09:00:30Z');
    const tally = new LimitHitsTally(start);
    const m0 = new Date('2026-11-27T09:00:00Z');
    const m1 = new Date('2026-11-27T09:01:00Z');
    expect(tally.readFrom()).toEqual(m0);
    tally.apply([{ tenant: 't', limit: 'runsPerMinute', minute: m0, hits: 2 }], new Date('2026-11-27T09:00:40Z'), 5);
    tally.apply(
      [
        { tenant: 't', limit: 'runsPerMinute', minute: m0, hits: 3 },
        { tenant: 't', limit: 'runsPerMinute', minute: m1, hits: 4 },
      ],
      new Date('2026-11-27T09:01:10Z'),
      5,
    );
    expect(await values('orchestrator_limit_hits_total')).toEqual({ '{"tenant":"t","limit":"runsPerMinute"}': 7 });
    // Three minutes on, the first minute is settled: no longer read, and not counted again.
    tally.apply([{ tenant: 't', limit: 'runsPerMinute', minute: m1, hits: 4 }], new Date('2026-11-27T09:04:00Z'), 5);
    expect(tally.readFrom()).toEqual(m1);
    expect(await values('orchestrator_limit_hits_total')).toEqual({ '{"tenant":"t","limit":"runsPerMinute"}': 7 });
  });
});
