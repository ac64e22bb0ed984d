import { ConfigError, loadConfig } from '../../core/config/config';
import { clockFromConfig, ManualClock, ScaledClock, SystemClock } from './clock';

describe('scheduler clock', () => {
  it('is the system clock unless a test clock is configured', () => {
    expect(clockFromConfig(loadConfig({}))).toBeInstanceOf(SystemClock);
  });

  it('runs a configured test clock from its start at the anchor, at its speed', () => {
    const anchor = Date.now() - 10_000;
    const c = clockFromConfig(
      loadConfig({
        ORDO_TEST_CLOCK_START: '2026-06-01T00:00:00Z',
        ORDO_TEST_CLOCK_ANCHOR: String(anchor),
        ORDO_TEST_CLOCK_SPEED: '3',
      }),
    );
    expect(c).toBeInstanceOf(ScaledClock);
    const elapsed = c.now().getTime() - Date.parse('2026-06-01T00:00:00Z');
    expect(elapsed).toBeGreaterThanOrEqual(30_000);
    expect(elapsed).toBeLessThan(30_000 + 3 * 5_000);
    expect(c.realDelay(3_000)).toBe(1_000);
  });

  it.each([
    [{ ORDO_TEST_CLOCK_START: 'yesterday' }, 'ORDO_TEST_CLOCK_START'],
    [{ ORDO_TEST_CLOCK_START: '2026-06-01T00:00:00Z', ORDO_TEST_CLOCK_SPEED: '-1' }, 'ORDO_TEST_CLOCK_SPEED'],
    [{ ORDO_TEST_CLOCK_START: '2026-06-01T00:00:00Z', ORDO_TEST_CLOCK_ANCHOR: 'soon' }, 'ORDO_TEST_CLOCK_ANCHOR'],
  ])('refuses %j at configuration, naming the variable', (env, name) => {
    expect(() => loadConfig(env)).toThrow(ConfigError);
    expect(() => loadConfig(env)).toThrow(name);
  });

  it('moves a manual clock only when told to', () => {
    const c = new ManualClock(new Date('2026-01-01T00:00:00Z'));
    c.advance(1500);
    expect(c.now().toISOString()).toBe('2026-01-01T00:00:01.500Z');
    c.set(new Date('2027-01-01T00:00:00Z'));
    expect(c.now().toISOString()).toBe('2027-01-01T00:00:00.000Z');
  });
});
