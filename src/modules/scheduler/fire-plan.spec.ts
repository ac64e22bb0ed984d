import { CATCH_UP_ALL_LIMIT, MAX_FIRES_PER_CLAIM, planFires } from './fire-plan';

const T0 = Date.parse('2026-06-01T00:00:00Z');
const at = (ms: number) => new Date(T0 + ms);
const iso = (ds: Date[]) => ds.map((d) => d.toISOString());
const everyMinute = { cron: '0 * * * * *', timezone: 'UTC' };

describe('planFires', () => {
  it('does nothing before the next fire time', () => {
    const p = planFires({ ...everyMinute, catchUp: 'all', nextFireAt: at(60_000) }, at(59_999));
    expect(p).toEqual({ fires: [], droppedMissed: false, nextFireAt: at(60_000) });
  });

  it('fires every on-time fire time up to now and points at the following one', () => {
    const p = planFires({ ...everyMinute, catchUp: 'none', nextFireAt: at(60_000) }, at(60_000));
    expect(iso(p.fires)).toEqual([at(60_000).toISOString()]);
    expect(p.nextFireAt).toEqual(at(120_000));
  });

  it('treats fires within the grace period as on time, whatever the catch-up policy', () => {
    const p = planFires(
      { cron: '* * * * * *', timezone: 'UTC', catchUp: 'none', nextFireAt: at(1000) },
      at(5000),
      30_000,
    );
    expect(iso(p.fires)).toEqual([1000, 2000, 3000, 4000, 5000].map((ms) => at(ms).toISOString()));
    expect(p.droppedMissed).toBe(false);
  });

  it('drops missed fires with catch-up none', () => {
    const p = planFires({ ...everyMinute, catchUp: 'none', nextFireAt: at(60_000) }, at(3_600_000 + 45_000), 30_000);
    expect(p.fires).toEqual([]);
    expect(p.droppedMissed).toBe(true);
    expect(p.nextFireAt).toEqual(at(3_660_000));
  });

  it('keeps only the newest missed fire with catch-up latest', () => {
    const p = planFires({ ...everyMinute, catchUp: 'latest', nextFireAt: at(60_000) }, at(3_600_000 + 45_000), 30_000);
    expect(iso(p.fires)).toEqual([at(3_600_000).toISOString()]);
    expect(p.droppedMissed).toBe(true);
  });

  it(`keeps the oldest ${CATCH_UP_ALL_LIMIT} missed fires with catch-up all, oldest first`, () => {
    const p = planFires({ ...everyMinute, catchUp: 'all', nextFireAt: at(60_000) }, at(200 * 60_000 + 45_000), 30_000);
    expect(p.fires).toHaveLength(CATCH_UP_ALL_LIMIT);
    expect(p.fires[0]).toEqual(at(60_000));
    expect(p.fires[CATCH_UP_ALL_LIMIT - 1]).toEqual(at(CATCH_UP_ALL_LIMIT * 60_000));
    expect(p.droppedMissed).toBe(true);
    expect(p.nextFireAt).toEqual(at(201 * 60_000));
  });

  it('bounds the on-time fires handled per claim', () => {
    const p = planFires(
      { cron: '* * * * * *', timezone: 'UTC', catchUp: 'none', nextFireAt: at(1000) },
      at(1_000_000),
      2_000_000,
    );
    expect(p.fires).toHaveLength(MAX_FIRES_PER_CLAIM);
    expect(p.nextFireAt).toEqual(at((MAX_FIRES_PER_CLAIM + 1) * 1000));
  });

  it('keeps the DST rule: a missed 02:30 Berlin fire on the spring-forward day is the 03:00 instant', () => {
    const nextFireAt = new Date('2026-03-29T01:00:00Z');
    const p = planFires(
      { cron: '30 2 * * *', timezone: 'Europe/Berlin', catchUp: 'latest', nextFireAt },
      new Date('2026-03-29T12:00:00Z'),
    );
    expect(iso(p.fires)).toEqual(['2026-03-29T01:00:00.000Z']);
    expect(p.nextFireAt).toEqual(new Date('2026-03-30T00:30:00Z'));
  });
});
