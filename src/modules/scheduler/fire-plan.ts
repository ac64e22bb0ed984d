import { fireTimes, lastFireTimeBetween, parseCron } from './cron';
import type { CatchUp } from './schedules.repository';

/** A fire more than this late counts as missed (downtime, pause) and falls under the catch-up policy. */
export const MISFIRE_GRACE_MS = 30_000;
/** catchUp = all replays at most this many missed fires, the oldest first; later missed fires beyond them are dropped. */
export const CATCH_UP_ALL_LIMIT = 100;
/** At most this many on-time fires are handled per claim; the rest wait for the next tick. */
export const MAX_FIRES_PER_CLAIM = 200;

export interface FirePlan {
  /** Fire times to act on now, oldest first. */
  fires: Date[];
  /** True when missed fire times were left out (catch-up none/latest, or beyond the `all` limit). */
  droppedMissed: boolean;
  /** The earliest fire time still to handle afterwards; null when the expression has no more. */
  nextFireAt: Date | null;
}

/**
 * Decides which fire times of a schedule to act on at `now`, given the earliest unhandled one.
 * Fires in [nextFireAt, now - grace) are missed: `none` drops them, `latest` keeps the newest,
 * `all` keeps the oldest CATCH_UP_ALL_LIMIT. Fires in [now - grace, now] are on time and all kept.
 */
export function planFires(
  s: { cron: string; timezone: string; catchUp: CatchUp; nextFireAt: Date | null },
  now: Date,
  graceMs = MISFIRE_GRACE_MS,
): FirePlan {
  if (s.nextFireAt === null || s.nextFireAt > now) return { fires: [], droppedMissed: false, nextFireAt: s.nextFireAt };
  const c = parseCron(s.cron);
  const graceStart = new Date(now.getTime() - graceMs);
  const fires: Date[] = [];
  let droppedMissed = false;
  if (s.nextFireAt < graceStart) {
    const missedEnd = new Date(graceStart.getTime() - 1);
    switch (s.catchUp) {
      case 'none':
        droppedMissed = true;
        break;
      case 'latest': {
        const last = lastFireTimeBetween(s.cron, s.timezone, s.nextFireAt, missedEnd);
        if (last) fires.push(last);
        droppedMissed = last !== undefined && last.getTime() !== s.nextFireAt.getTime();
        break;
      }
      case 'all':
        for (const t of fireTimes(c, s.timezone, new Date(s.nextFireAt.getTime() - 1))) {
          if (t >= graceStart) break;
          if (fires.length >= CATCH_UP_ALL_LIMIT) {
            droppedMissed = true;
            break;
          }
          fires.push(t);
        }
        break;
    }
  }
  // On-time fires: from the later of nextFireAt and graceStart, up to now.
  const from = s.nextFireAt > graceStart ? s.nextFireAt : graceStart;
  let nextFireAt: Date | null = null;
  let onTime = 0;
  for (const t of fireTimes(c, s.timezone, new Date(from.getTime() - 1))) {
    if (t > now || onTime >= MAX_FIRES_PER_CLAIM) {
      nextFireAt = t;
      break;
    }
    fires.push(t);
    onTime++;
  }
  return { fires, droppedMissed, nextFireAt };
}
