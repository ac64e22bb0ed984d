import { nextReputation, type Reputation } from './reputation';

const fresh = (at: Date): Reputation & { updatedAt: Date } => ({
  successes: 0,
  failures: 0,
  violations: 0,
  timeouts: 0,
  tasks: 0,
  score: 0.5,
  updatedAt: at,
});
const HOUR = 3_600_000;

describe('nextReputation', () => {
  const t0 = new Date('2026-01-01T00:00:00Z');

  it('rises with successes and falls with failures', () => {
    const up = nextReputation(fresh(t0), 'success', t0, HOUR);
    expect(up.score).toBeCloseTo(2 / 3);
    const down = nextReputation(fresh(t0), 'failure', t0, HOUR);
    expect(down.score).toBeCloseTo(1 / 3);
    expect(down.tasks).toBe(1);
  });

  it('weighs a contract violation as three failures and counts it', () => {
    const v = nextReputation(fresh(t0), 'violation', t0, HOUR);
    expect(v.score).toBeCloseTo(1 / 5);
    expect(v.violations).toBe(1);
    const twice = nextReputation({ ...v, updatedAt: t0 }, 'violation', t0, HOUR);
    expect(twice.score).toBeCloseTo(1 / 8);
  });

  it('counts timeouts and leaves input failures neutral', () => {
    const t = nextReputation(fresh(t0), 'timeout', t0, HOUR);
    expect(t.timeouts).toBe(1);
    expect(t.score).toBeCloseTo(1 / 3);
    const n = nextReputation(fresh(t0), 'neutral', t0, HOUR);
    expect(n.score).toBeCloseTo(0.5);
  });

  it('halves past outcomes after one half-life', () => {
    const bad = { ...nextReputation(fresh(t0), 'violation', t0, HOUR), updatedAt: t0 };
    const later = nextReputation(bad, 'success', new Date(t0.getTime() + HOUR), HOUR);
    expect(later.failures).toBeCloseTo(1.5);
    expect(later.successes).toBeCloseTo(1);
    expect(later.score).toBeCloseTo(2 / 4.5);
  });
});
