import type { OrdoConfig } from '../../core/config/config';

/** The scheduler's notion of now. Injected so tests can move time without waiting for it. */
export abstract class Clock {
  abstract now(): Date;
  /** Real milliseconds to wait for `ms` of this clock's time to pass. */
  abstract realDelay(ms: number): number;
}

export class SystemClock extends Clock {
  now(): Date {
    return new Date();
  }
  realDelay(ms: number): number {
    return ms;
  }
}

/** Time moves only when told to (tests). */
export class ManualClock extends Clock {
  private t: number;
  constructor(start: Date) {
    super();
    this.t = start.getTime();
  }
  now(): Date {
    return new Date(this.t);
  }
  set(t: Date): void {
    this.t = t.getTime();
  }
  advance(ms: number): void {
    this.t += ms;
  }
  realDelay(ms: number): number {
    return Math.min(ms, 50);
  }
}

/** Virtual time: `start` at real instant `anchor`, running `speed` times faster than real time. */
export class ScaledClock extends Clock {
  constructor(
    private readonly start: number,
    private readonly anchor: number,
    private readonly speed: number,
  ) {
    super();
  }
  now(): Date {
    return new Date(this.start + (Date.now() - this.anchor) * this.speed);
  }
  realDelay(ms: number): number {
    return ms / this.speed;
  }
}

/**
 * The scheduler clock for this process: the system clock, or, with the test-only
 * ORDO_TEST_CLOCK_START, a clock that reads that instant at real instant ORDO_TEST_CLOCK_ANCHOR
 * (default: now) and runs ORDO_TEST_CLOCK_SPEED (default 1) times faster, so several processes
 * share one virtual time. The values are validated with the rest of the configuration.
 */
export function clockFromConfig(
  config: Pick<OrdoConfig, 'ORDO_TEST_CLOCK_START' | 'ORDO_TEST_CLOCK_ANCHOR' | 'ORDO_TEST_CLOCK_SPEED'>,
): Clock {
  if (!config.ORDO_TEST_CLOCK_START) return new SystemClock();
  return new ScaledClock(
    Date.parse(config.ORDO_TEST_CLOCK_START),
    config.ORDO_TEST_CLOCK_ANCHOR ?? Date.now(),
    config.ORDO_TEST_CLOCK_SPEED ?? 1,
  );
}
