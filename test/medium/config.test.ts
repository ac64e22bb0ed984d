import path from 'node:path';
import { ConfigError, loadConfig } from '../../src/core/config/config';

const fails = (env: Record<string, string>): ConfigError => {
  try {
    loadConfig(env);
  } catch (e) {
    if (e instanceof ConfigError) return e;
    throw e;
  }
  throw new Error(`expected ${JSON.stringify(env)} to be rejected`);
};

describe('environment validation', () => {
  it('starts from documented defaults', () => {
    const c = loadConfig({});
    expect(c).toMatchObject({
      HOST: '127.0.0.1',
      PORT: 8080,
      ORDO_ROLES: ['api', 'scheduler', 'worker'],
      ORDO_HOME: '.ordo',
      ORDO_BODY_LIMIT_BYTES: 1024 * 1024,
      ORDO_BOOTSTRAP_TENANT: 'default',
      ORDO_TENANT_MAX_IN_FLIGHT: 64,
      ORDO_TENANT_SHARED_IN_FLIGHT: 8,
      ORDO_TENANT_SHARED_WINDOW_MS: 30_000,
      ORDO_DEBUG: false,
      ORDO_ENGINE_PROFILE: false,
      ORDO_CHAOS_COMMIT_ERROR_RATE: 0,
      ORDO_DB_STATEMENT_TIMEOUT_MS: 120_000,
      ORDO_DB_IDLE_IN_TRANSACTION_TIMEOUT_MS: 30_000,
    });
    expect(c.ORDO_POOLER_DATABASE_URL).toBeUndefined();
    expect(c.ORDO_DB_PREPARED_STATEMENTS).toBeUndefined();
    expect(c.ORDO_TEST_CLOCK_START).toBeUndefined();
    expect(c.home).toBe(path.resolve('.ordo'));
    expect(c.DATABASE_URL).toBeUndefined();
  });

  it.each([
    ['PORT', 'abc'],
    ['PORT', '70000'],
    ['ORDO_ROLES', 'foo'],
    ['ORDO_ROLES', 'api,web'],
    ['ORDO_ROLES', ' , '],
    ['DATABASE_URL', 'mysql://x'],
    ['ORDO_APP_DATABASE_URL', 'http://x'],
    ['ORDO_BODY_LIMIT_BYTES', '10'],
    ['ORDO_BOOTSTRAP_TENANT', 'Not Valid'],
    ['LOG_LEVEL', 'loud'],
    ['REDIS_URL', 'memcached://x'],
    ['ORDO_TENANT_SHARED_IN_FLIGHT', '-1'],
    ['ORDO_TENANT_SHARED_IN_FLIGHT', 'half'],
    ['ORDO_TENANT_SHARED_WINDOW_MS', '10'],
    ['ORDO_DEBUG', 'maybe'],
    ['ORDO_ENGINE_PROFILE', 'on'],
    ['ORDO_CHAOS_COMMIT_ERROR_RATE', '1.5'],
    ['ORDO_CHAOS_COMMIT_ERROR_RATE', '-0.1'],
    ['ORDO_TEST_CLOCK_START', 'yesterday'],
    ['ORDO_TEST_CLOCK_ANCHOR', 'soon'],
    ['ORDO_TEST_CLOCK_SPEED', '0'],
    ['ORDO_POOLER_DATABASE_URL', 'http://127.0.0.1:6432/ordo'],
    ['ORDO_POOLER_DATABASE_URL', 'postgres://ordo_app:secret@127.0.0.1:6432/ordo'],
    ['ORDO_POOLER_DATABASE_URL', 'postgres://ordo_app@127.0.0.1:6432/ordo'],
    ['ORDO_DB_PREPARED_STATEMENTS', 'sometimes'],
    ['ORDO_DB_STATEMENT_TIMEOUT_MS', '-1'],
    ['ORDO_DB_IDLE_IN_TRANSACTION_TIMEOUT_MS', '1.5'],
  ])('rejects %s=%s with a message naming the variable', (name, value) => {
    const e = fails({ [name]: value });
    expect(e.message).toContain(name);
    expect(e.issues.every((i) => i.startsWith(name))).toBe(true);
  });

  it('takes a pooler address without credentials, and the database settings', () => {
    const c = loadConfig({
      ORDO_POOLER_DATABASE_URL: 'postgres://127.0.0.1:6432/ordo',
      ORDO_DB_PREPARED_STATEMENTS: 'true',
      ORDO_DB_STATEMENT_TIMEOUT_MS: '0',
      ORDO_DB_IDLE_IN_TRANSACTION_TIMEOUT_MS: '5000',
    });
    expect(c).toMatchObject({
      ORDO_POOLER_DATABASE_URL: 'postgres://127.0.0.1:6432/ordo',
      ORDO_DB_PREPARED_STATEMENTS: true,
      ORDO_DB_STATEMENT_TIMEOUT_MS: 0,
      ORDO_DB_IDLE_IN_TRANSACTION_TIMEOUT_MS: 5_000,
    });
  });

  it('names every bad variable at once', () => {
    const e = fails({ PORT: 'x', ORDO_ROLES: 'nope' });
    expect(e.issues).toHaveLength(2);
    expect(e.message).toMatch(/PORT/);
    expect(e.message).toMatch(/ORDO_ROLES: unknown role "nope"/);
  });

  it('treats empty values as unset and normalises the role list', () => {
    const c = loadConfig({ PORT: '', DATABASE_URL: '', ORDO_ROLES: ' worker , api,worker ' });
    expect(c.PORT).toBe(8080);
    expect(c.DATABASE_URL).toBeUndefined();
    expect(c.ORDO_ROLES).toEqual(['worker', 'api']);
  });

  it('parses the benchmark and test-only switches', () => {
    const c = loadConfig({
      ORDO_DEBUG: 'yes',
      ORDO_ENGINE_PROFILE: '1',
      ORDO_CHAOS_COMMIT_ERROR_RATE: '0.01',
      ORDO_TEST_CLOCK_START: '2026-06-01T00:00:00Z',
      ORDO_TEST_CLOCK_ANCHOR: '1780272000000',
      ORDO_TEST_CLOCK_SPEED: '60',
    });
    expect(c).toMatchObject({
      ORDO_DEBUG: true,
      ORDO_ENGINE_PROFILE: true,
      ORDO_CHAOS_COMMIT_ERROR_RATE: 0.01,
      ORDO_TEST_CLOCK_START: '2026-06-01T00:00:00Z',
      ORDO_TEST_CLOCK_ANCHOR: 1780272000000,
      ORDO_TEST_CLOCK_SPEED: 60,
    });
  });

  it('accepts postgres and postgresql URLs', () => {
    expect(loadConfig({ DATABASE_URL: 'postgresql://u:p@h:5432/d' }).DATABASE_URL).toBe('postgresql://u:p@h:5432/d');
    expect(loadConfig({ DATABASE_URL: 'postgres://h/d' }).DATABASE_URL).toBe('postgres://h/d');
  });
});
