import { backoffDelay, sleep } from './backoff';

describe('backoffDelay', () => {
  const opts = { baseMs: 100, maxMs: 5_000 };

  it('doubles its ceiling on each retry up to the cap, keeping at least half of it', () => {
    for (const [retry, ceiling] of [
      [0, 100],
      [1, 200],
      [3, 800],
      [10, 5_000],
      [1_000, 5_000],
    ]) {
      expect(backoffDelay(retry, opts, () => 0)).toBe(ceiling / 2);
      expect(backoffDelay(retry, opts, () => 1)).toBe(ceiling);
    }
  });

  it('spreads delays between half the ceiling and the ceiling with the random draw', () => {
    const draws = [0.1, 0.5, 0.9].map((r) => backoffDelay(2, opts, () => r));
    expect(draws).toEqual([220, 300, 380]);
  });
});

describe('sleep', () => {
  it('resolves at once when its signal aborts', async () => {
    const c = new AbortController();
    const slept = sleep(60_000, c.signal);
    c.abort();
    await expect(slept).resolves.toBeUndefined();
  });
});
