import { z } from 'zod';

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

const testClockEnv = z.object({
  ORDO_TEST_CLOCK_START: z.iso.datetime({ offset: true }).optional(),
  ORDO_TEST_CLOCK_ANCHOR: z.coerce.number().int().positive().optional(),
  ORDO_TEST_CLOCK_SPEED: z.coerce.number().positive().max(10_000).optional(),
});

/**
 * The scheduler clock for this process. Test-only: ORDO_TEST_CLOCK_START (ISO instant) makes the
 * scheduler's time start there at real instant ORDO_TEST_CLOCK_ANCHOR (epoch ms; default: now) and
 * run ORDO_TEST_CLOCK_SPEED (default 1) times faster, so several processes share one virtual time.
 * Throws naming the variable when a value is malformed.
 */
export function clockFromEnv(env: NodeJS.ProcessEnv = process.env): Clock {
  const parsed = testClockEnv.safeParse({
    ORDO_TEST_CLOCK_START: env.ORDO_TEST_CLOCK_START || undefined,
    ORDO_TEST_CLOCK_ANCHOR: env.ORDO_TEST_CLOCK_ANCHOR || undefined,
    ORDO_TEST_CLOCK_SPEED: env.ORDO_TEST_CLOCK_SPEED || undefined,
  });
  if (!parsed.success) {
    throw new Error(
      `invalid environment: ${parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')}`,
    );
  }
  const e = parsed.data;
  if (!e.ORDO_TEST_CLOCK_START) return new SystemClock();
  return new ScaledClock(
    Date.parse(e.ORDO_TEST_CLOCK_START),
    e.ORDO_TEST_CLOCK_ANCHOR ?? Date.now(),
    e.ORDO_TEST_CLOCK_SPEED ?? 1,
  );
}
