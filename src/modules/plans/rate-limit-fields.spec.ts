import { expiringLimit, rateLimitFields, type CheckedLimit } from './rate-limit-fields';

const checked = (
  limit: CheckedLimit['limit'],
  points: number,
  remaining: number,
  msBeforeReset: number,
  windowSeconds = 1,
): CheckedLimit => ({
  limit,
  state: { limit: points, windowSeconds, allowed: remaining > 0, remaining, msBeforeReset },
});

describe('RateLimit fields (draft-ietf-httpapi-ratelimit-headers-06)', () => {
  it('reports the limit with the fewest points left, and lists every policy once per quota value', () => {
    const token = checked('requestsPerSecondPerToken', 10, 7, 400);
    const tenant = checked('requestsPerSecondPerTenant', 50, 2, 900);
    expect(rateLimitFields([token, tenant])).toEqual({
      'RateLimit-Limit': '50',
      'RateLimit-Remaining': '2',
      'RateLimit-Reset': '1',
      'RateLimit-Policy': '50;w=1, 10;w=1',
    });
    const same = checked('requestsPerSecondPerTenant', 10, 3, 900);
    expect(rateLimitFields([token, same])['RateLimit-Policy']).toBe('10;w=1');
  });

  it('among limits with nothing left, reports the one that reopens last', () => {
    const a = checked('requestsPerSecondPerToken', 5, 0, 200);
    const b = checked('runsPerMinute', 5, 0, 42_100, 60);
    expect(expiringLimit([a, b]).limit).toBe('runsPerMinute');
    expect(rateLimitFields([a, b])).toMatchObject({ 'RateLimit-Reset': '43', 'RateLimit-Policy': '5;w=60' });
  });
});
