import { canonicalJson } from '../../src/core/json/canonical-json';
import { compileInputSchema } from '../../src/modules/dags/input-schema';
import { redactSecrets } from '../../src/modules/export/export-format';
import { CronError, parseCron } from '../../src/modules/scheduler/cron';
import { PROTOTYPE_KEYS } from '../support/fuzz/arbitrary-from-schema';

/**
 * Functions that look values up by caller-given names, called directly: a name of an
 * Object.prototype member is an ordinary name there, never one of Object's members.
 */
describe('prototype member names as keys', () => {
  it.each(PROTOTYPE_KEYS)('parses the cron expression %p as a malformed one-field expression', (name) => {
    for (const expr of [name, name.toUpperCase(), `  ${name}  `]) {
      expect(() => parseCron(expr)).toThrow(new CronError('INVALID_CRON', 'expected 5 or 6 fields, got 1'));
    }
  });

  it('keeps a config key named __proto__ when redacting an exported step config, redacting inside it', () => {
    const config = JSON.parse(
      '{"output":{"__proto__":{"token":"t0p","kept":1},"constructor":{"password":"p"},"toString":"x"}}',
    ) as unknown;
    const out = redactSecrets(config);
    expect(canonicalJson(out)).toBe(
      '{"output":{"__proto__":{"kept":1,"token":"[redacted]"},"constructor":{"password":"[redacted]"},"toString":"x"}}',
    );
    expect(Object.getPrototypeOf((out as { output: object }).output)).toBe(Object.prototype);
  });

  it('validates run inputs against declared prototype member names by own keys only, at any depth', () => {
    const schema = compileInputSchema({
      type: 'object',
      properties: {
        constructor: { type: 'string' },
        nested: {
          type: 'object',
          properties: { toString: { type: 'string' }, hasOwnProperty: { type: 'number' } },
          required: ['hasOwnProperty'],
        },
        list: { type: 'array', items: { type: 'object', properties: { valueOf: { type: 'boolean' } } } },
      },
      required: ['constructor'],
    });
    const issuesOf = (inputs: unknown) => {
      const r = schema.safeParse(inputs);
      return r.success ? [] : r.error.issues.map((i) => i.path.join('.'));
    };
    expect(issuesOf({})).toEqual(['constructor']);
    expect(issuesOf({ constructor: 'c', nested: {} })).toEqual(['nested.hasOwnProperty']);
    expect(issuesOf({ constructor: 'c', nested: { hasOwnProperty: 1 }, list: [{}, { valueOf: true }] })).toEqual([]);
    expect(issuesOf({ constructor: 'c', list: [{ valueOf: 'no' }] })).toEqual(['list.0.valueOf']);
  });

  it('validates deeply nested run inputs without exhausting the stack', () => {
    const schema = compileInputSchema({ type: 'object', properties: { a: {} } });
    let deep: unknown = 1;
    for (let i = 0; i < 100_000; i++) deep = { a: deep };
    expect(schema.safeParse({ a: deep }).success).toBe(true);
  });
});
