import { SchemaError, TaskSchemas } from './task-schemas';

describe('TaskSchemas', () => {
  const schemas = new TaskSchemas();

  it('accepts values that match and names the first mismatch of those that do not', () => {
    const s = { type: 'object', required: ['width'], properties: { width: { type: 'integer', minimum: 1 } } };
    expect(schemas.mismatch(s, { width: 3 })).toBeNull();
    expect(schemas.mismatch(s, { width: 0 })).toBe('/width: must be >= 1');
    expect(schemas.mismatch(s, {})).toBe("/: must have required property 'width'");
  });

  it('reads draft 2020-12 and draft-07 schemas by their $schema', () => {
    const v2020 = {
      $schema: 'https://json-schema.org/draft/2020-12/schema',
      type: 'array',
      prefixItems: [{ type: 'string' }],
    };
    expect(schemas.mismatch(v2020, ['a'])).toBeNull();
    expect(schemas.mismatch(v2020, [1])).toBe('/0: must be string');
    const v7 = { $schema: 'http://json-schema.org/draft-07/schema#', type: 'array', items: [{ type: 'string' }] };
    expect(schemas.mismatch(v7, [1])).toBe('/0: must be string');
  });

  it('reads draft 2019-09 schemas by their $schema', () => {
    const v2019 = {
      $schema: 'https://json-schema.org/draft/2019-09/schema',
      type: 'object',
      dependentRequired: { a: ['b'] },
    };
    expect(schemas.mismatch(v2019, { a: 1, b: 2 })).toBeNull();
    expect(schemas.mismatch(v2019, { a: 1 })).toBe('/: must have property b when property a is present');
  });

  it('matches patterns in linear time: a backtracking pattern cannot stall the process', () => {
    const s = { type: 'object', properties: { s: { type: 'string', pattern: '^(a+)+$' } } };
    // A backtracking engine takes some 2^40 steps on this value (the test would not end); RE2 a few.
    expect(schemas.mismatch(s, { s: `${'a'.repeat(40)}!` })).toBe('/s: must match pattern "^(a+)+$"');
    expect(schemas.mismatch(s, { s: 'aaaa' })).toBeNull();
  });

  it('refuses a pattern RE2 cannot run (a backreference), naming where it was declared', () => {
    expect(() => schemas.check('taskTypes[0].inputSchema', { type: 'string', pattern: '^(a)\\1$' })).toThrow(
      /^taskTypes\[0\]\.inputSchema: /,
    );
  });

  it('checks formats', () => {
    expect(schemas.mismatch({ type: 'string', format: 'uri' }, 'not a uri')).toBe('/: must match format "uri"');
  });

  it('refuses a malformed schema, naming where it was declared', () => {
    expect(() => schemas.check('taskTypes[0].outputSchema', { type: 'no-such-type' })).toThrow(SchemaError);
    expect(() => schemas.check('taskTypes[0].outputSchema', { type: 'no-such-type' })).toThrow(
      /^taskTypes\[0\]\.outputSchema: /,
    );
  });
});
