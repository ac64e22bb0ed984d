import { Cron } from 'croner';
import fc from 'fast-check';
import { DomainError } from '../../core/errors/domain-error';
import { lastFireTimeBetween, nextFireTimes, parseCron, previewFireTimes, validateCron } from './cron';

const iso = (ds: Date[]) => ds.map((d) => d.toISOString());

describe('cron evaluation', () => {
  it('fires a daily 02:30 Europe/Berlin job at 03:00 CEST on the spring-forward day, then at 02:30 again', () => {
    const t = previewFireTimes('30 2 * * *', 'Europe/Berlin', new Date('2026-03-28T12:00:00Z'), 3);
    expect(t.map((f) => f.utc.toISOString())).toEqual([
      '2026-03-29T01:00:00.000Z',
      '2026-03-30T00:30:00.000Z',
      '2026-03-31T00:30:00.000Z',
    ]);
    expect(t.map((f) => f.local)).toEqual([
      '2026-03-29T03:00:00+02:00',
      '2026-03-30T02:30:00+02:00',
      '2026-03-31T02:30:00+02:00',
    ]);
  });

  it('collapses several wall-clock times inside the gap into one fire at the end of the gap', () => {
    expect(iso(nextFireTimes('*/20 2 * * *', 'America/New_York', new Date('2026-03-07T12:00:00Z'), 4))).toEqual([
      '2026-03-08T07:00:00.000Z',
      '2026-03-09T06:00:00.000Z',
      '2026-03-09T06:20:00.000Z',
      '2026-03-09T06:40:00.000Z',
    ]);
  });

  it('fires a daily 01:30 America/New_York job once on the fall-back day', () => {
    expect(iso(nextFireTimes('30 1 * * *', 'America/New_York', new Date('2026-10-31T12:00:00Z'), 3))).toEqual([
      '2026-11-01T05:30:00.000Z',
      '2026-11-02T06:30:00.000Z',
      '2026-11-03T06:30:00.000Z',
    ]);
  });

  it('fires every minute of a repeated hour once when the hour is fixed', () => {
    const times = nextFireTimes('*/15 1 * * *', 'America/New_York', new Date('2026-10-31T12:00:00Z'), 5);
    expect(iso(times)).toEqual([
      '2026-11-01T05:00:00.000Z',
      '2026-11-01T05:15:00.000Z',
      '2026-11-01T05:30:00.000Z',
      '2026-11-01T05:45:00.000Z',
      '2026-11-02T06:00:00.000Z',
    ]);
  });

  it('fires an hourly job at every real hour across fall-back (the 01:00 hour twice)', () => {
    expect(iso(nextFireTimes('0 */1 * * *', 'America/New_York', new Date('2026-11-01T03:30:00Z'), 5))).toEqual([
      '2026-11-01T04:00:00.000Z',
      '2026-11-01T05:00:00.000Z',
      '2026-11-01T06:00:00.000Z',
      '2026-11-01T07:00:00.000Z',
      '2026-11-01T08:00:00.000Z',
    ]);
    const local = previewFireTimes('0 */1 * * *', 'America/New_York', new Date('2026-11-01T04:30:00Z'), 2).map(
      (f) => f.local,
    );
    expect(local).toEqual(['2026-11-01T01:00:00-04:00', '2026-11-01T01:00:00-05:00']);
  });

  it('fires an hourly job at every real hour across spring-forward, none for the missing hour', () => {
    const t = previewFireTimes('0 */1 * * *', 'Europe/Berlin', new Date('2026-03-28T23:30:00Z'), 4);
    expect(t.map((f) => f.utc.toISOString())).toEqual([
      '2026-03-29T00:00:00.000Z',
      '2026-03-29T01:00:00.000Z',
      '2026-03-29T02:00:00.000Z',
      '2026-03-29T03:00:00.000Z',
    ]);
    expect(t.map((f) => f.local)).toEqual([
      '2026-03-29T01:00:00+01:00',
      '2026-03-29T03:00:00+02:00',
      '2026-03-29T04:00:00+02:00',
      '2026-03-29T05:00:00+02:00',
    ]);
  });

  it('fires every 30 minutes of real time through the repeated hour', () => {
    const t = nextFireTimes('*/30 * * * *', 'America/New_York', new Date('2026-11-01T04:50:00Z'), 6);
    expect(iso(t)).toEqual([
      '2026-11-01T05:00:00.000Z',
      '2026-11-01T05:30:00.000Z',
      '2026-11-01T06:00:00.000Z',
      '2026-11-01T06:30:00.000Z',
      '2026-11-01T07:00:00.000Z',
      '2026-11-01T07:30:00.000Z',
    ]);
  });

  it('evaluates 6-field expressions with seconds, in UTC', () => {
    expect(iso(nextFireTimes('*/15 * * * * *', 'UTC', new Date('2026-01-01T00:00:00Z'), 3))).toEqual([
      '2026-01-01T00:00:15.000Z',
      '2026-01-01T00:00:30.000Z',
      '2026-01-01T00:00:45.000Z',
    ]);
    expect(iso(nextFireTimes('0 0 * * *', 'UTC', new Date('2026-12-31T00:00:00Z'), 2))).toEqual([
      '2027-01-01T00:00:00.000Z',
      '2027-01-02T00:00:00.000Z',
    ]);
  });

  it('returns only instants strictly after the given one', () => {
    expect(iso(nextFireTimes('* * * * * *', 'UTC', new Date('2026-01-01T00:00:00Z'), 1))).toEqual([
      '2026-01-01T00:00:01.000Z',
    ]);
    expect(iso(nextFireTimes('* * * * * *', 'UTC', new Date('2026-01-01T00:00:00.500Z'), 1))).toEqual([
      '2026-01-01T00:00:01.000Z',
    ]);
  });

  it('applies classic cron day rules: names, Sunday as 0 or 7, day-of-month OR day-of-week', () => {
    expect(iso(nextFireTimes('0 9 * * SUN', 'UTC', new Date('2026-01-01T00:00:00Z'), 1))).toEqual([
      '2026-01-04T09:00:00.000Z',
    ]);
    expect(iso(nextFireTimes('0 9 * * 7', 'UTC', new Date('2026-01-01T00:00:00Z'), 1))).toEqual([
      '2026-01-04T09:00:00.000Z',
    ]);
    expect(iso(nextFireTimes('0 0 13 * FRI', 'UTC', new Date('2026-01-01T00:00:00Z'), 3))).toEqual([
      '2026-01-02T00:00:00.000Z',
      '2026-01-09T00:00:00.000Z',
      '2026-01-13T00:00:00.000Z',
    ]);
    // A day field starting with `*` keeps the AND: Mondays on odd days only.
    expect(iso(nextFireTimes('0 0 */2 * MON', 'UTC', new Date('2026-01-01T00:00:00Z'), 3))).toEqual([
      '2026-01-05T00:00:00.000Z',
      '2026-01-19T00:00:00.000Z',
      '2026-02-09T00:00:00.000Z',
    ]);
    expect(iso(nextFireTimes('0 0 29 FEB *', 'UTC', new Date('2026-01-01T00:00:00Z'), 1))).toEqual([
      '2028-02-29T00:00:00.000Z',
    ]);
    expect(iso(nextFireTimes('@hourly', 'UTC', new Date('2026-01-01T00:10:00Z'), 1))).toEqual([
      '2026-01-01T01:00:00.000Z',
    ]);
  });

  it('finds the latest fire time in a range', () => {
    const last = lastFireTimeBetween(
      '0 * * * *',
      'UTC',
      new Date('2026-01-01T00:00:00Z'),
      new Date('2026-01-03T05:30:00Z'),
    );
    expect(last?.toISOString()).toBe('2026-01-03T05:00:00.000Z');
    expect(
      lastFireTimeBetween('0 0 * * *', 'UTC', new Date('2026-01-01T00:00:01Z'), new Date('2026-01-01T23:00:00Z')),
    ).toBeUndefined();
  });

  it.each([
    ['61 * * * *', 'INVALID_CRON'],
    ['* * * *', 'INVALID_CRON'],
    ['* * * * * * *', 'INVALID_CRON'],
    ['5-1 * * * *', 'INVALID_CRON'],
    ['*/0 * * * *', 'INVALID_CRON'],
    ['a * * * *', 'INVALID_CRON'],
    ['0 0 30 2 *', 'INVALID_CRON'],
    ['', 'INVALID_CRON'],
  ])('rejects the expression %p with %s', (expr, code) => {
    expect(() => validateCron(expr, 'UTC')).toThrow(DomainError);
    try {
      validateCron(expr, 'UTC');
    } catch (e) {
      expect((e as DomainError).code).toBe(code);
      expect((e as DomainError).status).toBe(400);
    }
  });

  it.each(['Mars/Base', 'Europe/Nowhere', '+05:00', '', 'utc offset'])('rejects the time zone %p', (tz) => {
    expect(() => validateCron('0 * * * *', tz)).toThrow(
      expect.objectContaining({ code: 'INVALID_TIMEZONE', status: 400 }),
    );
  });

  it('accepts valid expressions and zones', () => {
    expect(() => validateCron('0 30 2 * * *', 'Europe/Berlin')).not.toThrow();
    expect(() => validateCron('0 0 1 JAN-MAR MON-FRI', 'Asia/Kathmandu')).not.toThrow();
    expect(parseCron('0 12 * * *').everyHour).toBe(false);
    expect(parseCron('0 * * * *').everyHour).toBe(true);
  });
});

describe('cron evaluation against croner where no DST applies', () => {
  // Field generators produce the syntax both evaluators share: *, n, a-b, */n, a-b/n and lists.
  // `*/n` in a day field counts as unrestricted in classic cron (Vixie: the field starts with `*`),
  // croner counts it as restricted, so day fields are generated without it.
  const field = (min: number, max: number, starStep = true) =>
    fc.oneof(
      fc.constant('*'),
      fc.integer({ min, max }).map(String),
      fc
        .tuple(fc.integer({ min, max }), fc.integer({ min, max }))
        .map(([a, b]) => `${Math.min(a, b)}-${Math.max(a, b)}`),
      starStep
        ? fc.integer({ min: 1, max: Math.max(1, Math.floor((max - min) / 2)) }).map((n) => `*/${n}`)
        : fc.integer({ min, max }).map((a) => `${a}-${max}/2`),
      fc.uniqueArray(fc.integer({ min, max }), { minLength: 2, maxLength: 4 }).map((xs) => xs.join(',')),
    );
  const expr = fc
    .tuple(field(0, 59), field(0, 59), field(0, 23), field(1, 28, false), field(1, 12), field(0, 6, false))
    .map((f) => f.join(' '));
  const instant = fc.integer({ min: Date.parse('2020-01-01T00:00:00Z'), max: Date.parse('2035-01-01T00:00:00Z') });

  it.each(['UTC', 'Asia/Tokyo'])('gives the same next fire times as croner in %s', (tz) => {
    fc.assert(
      fc.property(expr, instant, (e, t) => {
        const from = new Date(Math.floor(t / 1000) * 1000);
        const ours = iso(nextFireTimes(e, tz, from, 5));
        const theirs = iso(new Cron(e, { timezone: tz, paused: true }).nextRuns(5, from));
        expect(ours).toEqual(theirs);
      }),
      { numRuns: 300 },
    );
  });

  it('yields strictly increasing instants across DST changes in many zones', () => {
    const zones = [
      'Europe/Berlin',
      'America/New_York',
      'Australia/Lord_Howe',
      'America/Santiago',
      'Asia/Tehran',
      'Pacific/Chatham',
    ];
    fc.assert(
      fc.property(expr, instant, fc.constantFrom(...zones), (e, t, tz) => {
        const times = nextFireTimes(e, tz, new Date(t), 20).map((d) => d.getTime());
        for (let i = 1; i < times.length; i++) expect(times[i]).toBeGreaterThan(times[i - 1]);
        if (times.length > 0) expect(times[0]).toBeGreaterThan(t);
      }),
      { numRuns: 200 },
    );
  });
});
