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
