import { runsWindow } from './rate-limit-runs';

describe('runsWindow (runsPerMinute with runsBurst as a rate-limiter-flexible window)', () => {
  it('is runsPerMinute runs a minute when the burst is the default', () => {
    for (const r of [1, 5, 60, 1000, 1_000_000]) expect(runsWindow(r)).toEqual({ limit: r, windowSeconds: 60 });
  });

  it('holds the whole burst and refills it at the rate', () => {
    expect(runsWindow(2, 6)).toEqual({ limit: 6, windowSeconds: 180 });
    expect(runsWindow(60, 1)).toEqual({ limit: 1, windowSeconds: 1 });
    expect(runsWindow(120, 30)).toEqual({ limit: 30, windowSeconds: 15 });
  });

  it('never lets more than the burst at once nor more than the rate over a window, on generated limits', () => {
    let seed = 42;
    const next = (max: number) => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return 1 + (seed % max);
    };
    for (let i = 0; i < 5_000; i++) {
      const perMinute = next(i % 2 ? 1_000_000 : 200);
      const burst = next(i % 3 ? 1_000_000 : 50);
      const w = runsWindow(perMinute, burst);
      expect(Number.isInteger(w.windowSeconds) && w.windowSeconds >= 1).toBe(true);
      expect(Number.isInteger(w.limit) && w.limit >= 1 && w.limit <= burst).toBe(true);
      expect((w.limit * 60) / w.windowSeconds).toBeLessThanOrEqual(perMinute + 1e-9);
    }
  });
});
