import { badRequest } from '../../core/errors/domain-error';

/**
 * Cron evaluation in an IANA time zone.
 *
 * Expressions have 5 fields (minute hour day-of-month month day-of-week) or 6 (second first).
 * Fields accept `*`, numbers, ranges `a-b`, steps `x/n`, lists `a,b`, month and weekday names
 * (JAN-DEC, SUN-SAT; 0 and 7 are Sunday). When both day-of-month and day-of-week are restricted
 * (neither starts with `*`) a day matches when either matches, else when both match (classic cron). Macros: @yearly @annually @monthly @weekly
 * @daily @midnight @hourly.
 *
 * Matching happens on the local wall clock of the time zone; each matching wall-clock time maps to
 * real instants by this rule (DST):
 * - A wall-clock time that does not exist (spring-forward gap) fires at the first instant after the
 *   gap (e.g. 02:30 in Europe/Berlin on the last Sunday of March fires at 03:00 CEST). Several
 *   such times collapse into that one instant; it fires once.
 * - A wall-clock time that occurs twice (fall-back overlap) fires once, at its first occurrence.
 * - Exception: when the hour field is `*` (or `*\/1`, `0-23`), the expression describes a period
 *   of real time, so every real instant whose local time matches fires: both occurrences of a
 *   repeated time fire, and times inside a gap do not (they have no instant; the period goes on).
 */

export interface CronExpression {
  seconds: Set<number>;
  minutes: Set<number>;
  hours: Set<number>;
  daysOfMonth: Set<number>;
  months: Set<number>;
  daysOfWeek: Set<number>;
  domRestricted: boolean;
  dowRestricted: boolean;
  everyHour: boolean;
}

export interface FireTime {
  utc: Date;
  /** Local wall-clock time with its UTC offset, ISO 8601 (e.g. 2026-03-29T03:00:00+02:00). */
  local: string;
}

/** Largest span searched for a next fire time: an expression with none in it never fires. */
const SEARCH_YEARS = 30;
const MONTHS = ['JAN', 'FEB', 'MAR', 'APR', 'MAY', 'JUN', 'JUL', 'AUG', 'SEP', 'OCT', 'NOV', 'DEC'];
const DAYS = ['SUN', 'MON', 'TUE', 'WED', 'THU', 'FRI', 'SAT'];
/** A Map: an expression is caller input, and `constructor` or `__proto__` must not find Object's members. */
const MACROS = new Map<string, string>([
  ['@yearly', '0 0 1 1 *'],
  ['@annually', '0 0 1 1 *'],
  ['@monthly', '0 0 1 * *'],
  ['@weekly', '0 0 * * 0'],
  ['@daily', '0 0 * * *'],
  ['@midnight', '0 0 * * *'],
  ['@hourly', '0 * * * *'],
]);

export class CronError extends Error {
  constructor(
    readonly code: 'INVALID_CRON' | 'INVALID_TIMEZONE',
    message: string,
  ) {
    super(message);
    this.name = 'CronError';
  }
}

function parseField(text: string, name: string, min: number, max: number, names?: string[]): Set<number> {
  const out = new Set<number>();
  const value = (s: string): number => {
    const upper = s.toUpperCase();
    const named = names?.indexOf(upper) ?? -1;
    if (named >= 0) return named + (name === 'month' ? 1 : 0);
    if (!/^\d+$/.test(s)) throw new CronError('INVALID_CRON', `${name}: "${s}" is not a number`);
    const n = Number(s);
    if (n < min || n > max) throw new CronError('INVALID_CRON', `${name}: ${n} is outside ${min}-${max}`);
    return n;
  };
  for (const part of text.split(',')) {
    const m = /^([^/]+)(?:\/(\d+))?$/.exec(part);
    if (!m) throw new CronError('INVALID_CRON', `${name}: "${part}" is malformed`);
    const [, range, stepText] = m;
    const step = stepText === undefined ? 1 : Number(stepText);
    if (step < 1 || step > max - min + 1)
      throw new CronError('INVALID_CRON', `${name}: step ${stepText} is out of range`);
    let lo: number;
    let hi: number;
    if (range === '*') {
      lo = min;
      hi = max;
    } else if (range.includes('-')) {
      const [a, b, ...rest] = range.split('-');
      if (rest.length > 0 || a === '' || b === '')
        throw new CronError('INVALID_CRON', `${name}: "${range}" is malformed`);
      lo = value(a);
      hi = value(b);
      if (lo > hi) throw new CronError('INVALID_CRON', `${name}: range ${range} is reversed`);
    } else {
      lo = value(range);
      hi = stepText === undefined ? lo : max;
    }
    for (let v = lo; v <= hi; v += step) out.add(v);
  }
  return out;
}

/** Parses an expression; throws CronError with a message naming the bad field. */
export function parseCron(expr: string): CronExpression {
  const trimmed = expr.trim();
  const expanded = MACROS.get(trimmed.toLowerCase()) ?? trimmed;
  const fields = expanded.split(/\s+/);
  if (fields.length !== 5 && fields.length !== 6) {
    throw new CronError('INVALID_CRON', `expected 5 or 6 fields, got ${trimmed === '' ? 0 : fields.length}`);
  }
  const [sec, min, hour, dom, month, dow] = fields.length === 6 ? fields : ['0', ...fields];
  const daysOfWeek = parseField(dow, 'day-of-week', 0, 7, DAYS);
  if (daysOfWeek.delete(7)) daysOfWeek.add(0);
  const hours = parseField(hour, 'hour', 0, 23);
  return {
    seconds: parseField(sec, 'second', 0, 59),
    minutes: parseField(min, 'minute', 0, 59),
    hours,
    daysOfMonth: parseField(dom, 'day-of-month', 1, 31),
    months: parseField(month, 'month', 1, 12, MONTHS),
    daysOfWeek,
    domRestricted: !dom.startsWith('*'),
    dowRestricted: !dow.startsWith('*'),
    everyHour: hours.size === 24,
  };
}

// ---- time zones -------------------------------------------------------------------------------

const formatters = new Map<string, Intl.DateTimeFormat>();

function formatter(tz: string): Intl.DateTimeFormat {
  let f = formatters.get(tz);
  if (!f) {
    f = new Intl.DateTimeFormat('en-US', {
      timeZone: tz,
      hourCycle: 'h23',
      year: 'numeric',
      month: 'numeric',
      day: 'numeric',
      hour: 'numeric',
      minute: 'numeric',
      second: 'numeric',
    });
    formatters.set(tz, f);
  }
  return f;
}

/** Throws CronError INVALID_TIMEZONE unless `tz` is an IANA zone name (or UTC). */
export function assertTimeZone(tz: string): void {
  if (!/^[A-Za-z][A-Za-z0-9_+\-/]*$/.test(tz)) throw new CronError('INVALID_TIMEZONE', `unknown time zone "${tz}"`);
  try {
    formatter(tz);
  } catch {
    throw new CronError('INVALID_TIMEZONE', `unknown time zone "${tz}"`);
  }
}

const offsetCache = new Map<string, number>();

/** The zone's UTC offset in ms at instant `t` (ms). Offsets change only on whole minutes. */
function offsetAt(tz: string, t: number): number {
  const minute = Math.floor(t / 60_000);
  const key = `${tz}|${minute}`;
  const cached = offsetCache.get(key);
  if (cached !== undefined) return cached;
  const at = minute * 60_000;
  const p: Record<string, number> = {};
  for (const part of formatter(tz).formatToParts(at)) if (part.type !== 'literal') p[part.type] = Number(part.value);
  const wall = Date.UTC(p.year, p.month - 1, p.day, p.hour, p.minute, p.second);
  const offset = wall - at;
  if (offsetCache.size > 50_000) offsetCache.clear();
  offsetCache.set(key, offset);
  return offset;
}

/**
 * The instants at which wall-clock time `wall` (ms, read as UTC fields) occurs in `tz`: one
 * normally, two in a fall-back overlap (ascending), none in a spring-forward gap (then `gapEnd`
 * is the first instant after the gap).
 */
function instantsOf(tz: string, wall: number): { instants: number[]; gapEnd?: number; earliest: number } {
  const before = offsetAt(tz, wall - 86_400_000);
  const after = offsetAt(tz, wall + 86_400_000);
  // No later wall-clock time maps to an instant before this one.
  const earliest = wall - Math.max(before, after);
  const instants: number[] = [];
  for (const o of before === after ? [before] : [before, after]) {
    const t = wall - o;
    if (offsetAt(tz, t) === o && !instants.includes(t)) instants.push(t);
  }
  if (instants.length > 0) return { instants: instants.sort((a, b) => a - b), earliest };
  // In a gap: the transition lies between the two readings; find its first second by bisection.
  let lo = Math.floor((wall - Math.max(before, after)) / 1000);
  let hi = Math.ceil((wall - Math.min(before, after)) / 1000);
  while (hi - lo > 1) {
    const mid = Math.floor((lo + hi) / 2);
    if (offsetAt(tz, mid * 1000) === after) hi = mid;
    else lo = mid;
  }
  return { instants: [], gapEnd: hi * 1000, earliest };
}

function formatLocal(tz: string, t: number): string {
  const o = offsetAt(tz, t);
  const wall = new Date(t + o).toISOString().slice(0, 19);
  const abs = Math.abs(o) / 60_000;
  const sign = o < 0 ? '-' : '+';
  return `${wall}${sign}${String(Math.floor(abs / 60)).padStart(2, '0')}:${String(abs % 60).padStart(2, '0')}`;
}

// ---- wall-clock enumeration -------------------------------------------------------------------

function dayMatches(c: CronExpression, y: number, m: number, d: number): boolean {
  const dim = new Date(Date.UTC(y, m, 0)).getUTCDate();
  if (d > dim) return false;
  const domOk = c.daysOfMonth.has(d);
  const dowOk = c.daysOfWeek.has(new Date(Date.UTC(y, m - 1, d)).getUTCDay());
  // Classic cron: when either day field starts with `*` (`*`, `*/2`), a day must match both.
  return c.domRestricted && c.dowRestricted ? domOk || dowOk : domOk && dowOk;
}

const sorted = (s: Set<number>) => [...s].sort((a, b) => a - b);

/** Matching wall-clock times (ms, UTC fields) at or after `fromWall`, ascending, within the search span. */
function* wallTimes(c: CronExpression, fromWall: number): Generator<number> {
  const secs = sorted(c.seconds);
  const mins = sorted(c.minutes);
  const hours = sorted(c.hours);
  const start = new Date(fromWall);
  const endYear = start.getUTCFullYear() + SEARCH_YEARS;
  let y = start.getUTCFullYear();
  let mo = start.getUTCMonth() + 1;
  let d = start.getUTCDate();
  let first = true;
  for (; y <= endYear; y++, mo = 1, d = 1) {
    for (; mo <= 12; mo++, d = 1) {
      if (!c.months.has(mo)) {
        first = false;
        continue;
      }
      for (; d <= 31; d++) {
        if (!dayMatches(c, y, mo, d)) {
          first = false;
          continue;
        }
        for (const h of hours) {
          // On the first day, whole hours and minutes before the start are skipped without enumeration.
          if (first && Date.UTC(y, mo - 1, d, h, 59, 59) < fromWall) continue;
          for (const mi of mins) {
            if (first && Date.UTC(y, mo - 1, d, h, mi, 59) < fromWall) continue;
            for (const s of secs) {
              const wall = Date.UTC(y, mo - 1, d, h, mi, s);
              if (first && wall < fromWall) continue;
              yield wall;
            }
          }
        }
        first = false;
      }
    }
  }
}

/**
 * Fire instants strictly after `afterUtc`, ascending, per the DST rule above. The iterator ends
 * when no fire time exists within the search span.
 */
export function* fireTimes(expr: string | CronExpression, tz: string, afterUtc: Date): Generator<Date> {
  const c = typeof expr === 'string' ? parseCron(expr) : expr;
  assertTimeZone(tz);
  const after = afterUtc.getTime();
  // Wall-clock times that can map to an instant after `after` start at its reading under the
  // smaller nearby offset (in an overlap, earlier wall-clock times map to later instants).
  const o1 = offsetAt(tz, after - 86_400_000);
  const o2 = offsetAt(tz, after + 86_400_000);
  const fromWall = Math.floor((after + Math.min(o1, o2)) / 1000) * 1000;
  // Instants produced but not yet emitted, ascending; once a wall time's `earliest` passes them
  // they are final. Outside overlaps each instant is emitted as soon as it is produced.
  const pending: number[] = [];
  let last = after;
  for (const wall of wallTimes(c, fromWall)) {
    const { instants, gapEnd, earliest } = instantsOf(tz, wall);
    const chosen = c.everyHour ? instants : instants.length > 0 ? [instants[0]] : gapEnd !== undefined ? [gapEnd] : [];
    for (const t of chosen) if (t > last) insertSorted(pending, t);
    let k = 0;
    while (k < pending.length && pending[k] <= earliest) k++;
    if (k > 0) {
      const ready = pending.splice(0, k);
      for (const t of ready) {
        last = t;
        yield new Date(t);
      }
    }
  }
  for (const t of pending) yield new Date(t);
}

/** Inserts `t` into the ascending array `xs` unless present. */
function insertSorted(xs: number[], t: number): void {
  const n = xs.length;
  if (n === 0 || t > xs[n - 1]) {
    xs.push(t);
    return;
  }
  let lo = 0;
  let hi = n;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (xs[mid] < t) lo = mid + 1;
    else hi = mid;
  }
  if (xs[lo] !== t) xs.splice(lo, 0, t);
}

/** The next `count` fire instants strictly after `afterUtc`. */
export function nextFireTimes(expr: string, tz: string, afterUtc: Date, count: number): Date[] {
  const out: Date[] = [];
  if (count <= 0) return out;
  for (const t of fireTimes(expr, tz, afterUtc)) {
    out.push(t);
    if (out.length >= count) break;
  }
  return out;
}

/** Like nextFireTimes, with each instant's local wall-clock time. */
export function previewFireTimes(expr: string, tz: string, afterUtc: Date, count: number): FireTime[] {
  return nextFireTimes(expr, tz, afterUtc, count).map((utc) => ({ utc, local: formatLocal(tz, utc.getTime()) }));
}

/** The latest fire instant in [notBefore, atOrBefore], or undefined. */
export function lastFireTimeBetween(expr: string, tz: string, notBefore: Date, atOrBefore: Date): Date | undefined {
  const c = parseCron(expr);
  const end = atOrBefore.getTime();
  const firstAfter = (t: number): number => {
    const next = fireTimes(c, tz, new Date(t)).next();
    return next.done ? Infinity : next.value.getTime();
  };
  // Fire instants are whole seconds. Bisect for the smallest second s whose next fire lies beyond
  // `end`: the latest fire is s itself.
  const lo0 = notBefore.getTime() - 1;
  if (firstAfter(lo0) > end) return undefined;
  let lo = Math.floor(lo0 / 1000);
  let hi = Math.floor(end / 1000);
  while (hi - lo > 1) {
    const mid = Math.floor((lo + hi) / 2);
    if (firstAfter(mid * 1000) > end) hi = mid;
    else lo = mid;
  }
  return new Date(hi * 1000);
}

/**
 * Validates an expression and zone for storage: both parse and at least one fire time exists.
 * Throws a 400 DomainError (INVALID_CRON / INVALID_TIMEZONE) otherwise.
 */
export function validateCron(expr: string, tz: string, now: Date = new Date()): void {
  try {
    assertTimeZone(tz);
    const c = parseCron(expr);
    const next = fireTimes(c, tz, now).next();
    if (next.done) throw new CronError('INVALID_CRON', `"${expr}" has no fire time in the next ${SEARCH_YEARS} years`);
  } catch (e) {
    if (e instanceof CronError) throw badRequest(e.code, e.message);
    throw e;
  }
}
