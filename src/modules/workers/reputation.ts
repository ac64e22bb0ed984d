/** What a finished task says about the worker that had it. */
export type TaskVerdict = 'success' | 'failure' | 'violation' | 'timeout' | 'neutral';

/** How much each kind of failure weighs against a worker (a success adds 1 to the other side). */
const WEIGHT: Record<Exclude<TaskVerdict, 'success' | 'neutral'>, number> = { failure: 1, timeout: 1, violation: 3 };

export interface Reputation {
  successes: number;
  failures: number;
  violations: number;
  timeouts: number;
  tasks: number;
  score: number;
}

/**
 * A worker name's reputation after one more task (the only home of the formula): past successes
 * and weighted failures decay with a half-life, then the verdict is added; the score is the
 * success ratio with one success and one failure of prior, (s + 1) / (s + f + 2), so a new worker
 * starts at 0.5 and a few outcomes move it. A failure the inputs caused (invalid_input) is neutral.
 */
export function nextReputation(
  prev: Reputation & { updatedAt: Date },
  verdict: TaskVerdict,
  now: Date,
  halfLifeMs: number,
): Reputation {
  const decay = 0.5 ** (Math.max(0, now.getTime() - prev.updatedAt.getTime()) / halfLifeMs);
  const successes = prev.successes * decay + (verdict === 'success' ? 1 : 0);
  const failures = prev.failures * decay + (verdict === 'success' || verdict === 'neutral' ? 0 : WEIGHT[verdict]);
  return {
    successes,
    failures,
    violations: prev.violations + (verdict === 'violation' ? 1 : 0),
    timeouts: prev.timeouts + (verdict === 'timeout' ? 1 : 0),
    tasks: prev.tasks + 1,
    score: (successes + 1) / (successes + failures + 2),
  };
}
