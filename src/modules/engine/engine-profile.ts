/**
 * The worker's time per phase, summed while ORDO_ENGINE_PROFILE is on (benchmarks) and printed at
 * shutdown; off, it records nothing.
 */
export class EngineProfile {
  private readonly phases = new Map<string, { n: number; ms: number }>();

  constructor(readonly enabled: boolean) {}

  /** Milliseconds since `t0` (from `start`) counted under `phase`. */
  add(phase: string, t0: number): void {
    if (!this.enabled) return;
    const e = this.phases.get(phase) ?? { n: 0, ms: 0 };
    e.n += 1;
    e.ms += performance.now() - t0;
    this.phases.set(phase, e);
  }

  /** A start time for `add` (0 when off: no clock read). */
  start(): number {
    return this.enabled ? performance.now() : 0;
  }

  print(write: (line: string) => void = (l) => console.error(l)): void {
    for (const [k, v] of this.phases)
      write(`engine profile ${k}: n=${v.n} total=${v.ms.toFixed(0)}ms mean=${(v.ms / v.n).toFixed(3)}ms`);
  }
}
