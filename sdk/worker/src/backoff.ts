export interface BackoffOptions {
  /** The first delay, doubled on each retry. */
  baseMs: number;
  /** The cap on a delay. */
  maxMs: number;
}

export const DEFAULT_BACKOFF: BackoffOptions = { baseMs: 200, maxMs: 10_000 };

/**
 * The delay before retry number `retry` (0 for the first): exponential up to the cap, with half of
 * it random ("equal jitter"), so workers that lost the same server do not come back in step.
 */
export function backoffDelay(retry: number, opts: BackoffOptions = DEFAULT_BACKOFF, random = Math.random): number {
  const ceiling = Math.min(opts.maxMs, opts.baseMs * 2 ** Math.min(retry, 30));
  return ceiling / 2 + random() * (ceiling / 2);
}

/** Resolves after `ms`, or at once when `signal` aborts (it never rejects). */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const done = () => {
      clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal?.addEventListener('abort', done, { once: true });
  });
}
