import { z } from 'zod';
import { compileSchema, isZodLike, loadJsonSchemaCompiler } from './schema';

describe('compileSchema', () => {
  it('declares a zod schema as its JSON Schema and validates with it, defaults applied', () => {
    const s = compileSchema(
      z.object({ width: z.number().int(), fit: z.string().default('cover') }),
      'input',
      undefined,
    );
    expect(s.json).not.toHaveProperty('$schema');
    expect(s.json).toMatchObject({
      type: 'object',
      properties: { width: { type: 'integer' }, fit: { type: 'string', default: 'cover' } },
      required: ['width'],
    });
    expect(s.validate!({ width: 3 })).toEqual({ ok: true, value: { width: 3, fit: 'cover' } });
    const bad = s.validate!({ width: 'x' });
    expect(bad.ok).toBe(false);
    expect(!bad.ok && bad.message).toMatch(/^width: /);
  });

  it('declares a JSON Schema as given and validates it through zod when zod is installed', async () => {
    const json = { type: 'object', properties: { url: { type: 'string' } }, required: ['url'] };
    const s = compileSchema(json, 'input', await loadJsonSchemaCompiler());
    expect(s.json).toBe(json);
    expect(s.validate!({ url: 'https://x' })).toEqual({ ok: true, value: { url: 'https://x' } });
    expect(s.validate!({ url: 3 }).ok).toBe(false);
    expect(s.validate!({}).ok).toBe(false);
  });

  it('does not let a property inherited from Object.prototype satisfy a required one', async () => {
    const json = { type: 'object', properties: { constructor: { type: 'string' } }, required: ['constructor'] };
    const s = compileSchema(json, 'input', await loadJsonSchemaCompiler());
    expect(s.validate!({}).ok).toBe(false);
    expect(s.validate!({ constructor: 'x' }).ok).toBe(true);
  });

  it('declares a JSON Schema without a validator when no JSON Schema compiler is at hand', () => {
    const s = compileSchema({ type: 'object' }, 'output', undefined);
    expect(s.validate).toBeUndefined();
  });

  it('refuses a schema that is neither zod nor a JSON Schema object', () => {
    expect(() => compileSchema([] as never, 'input', undefined)).toThrow(TypeError);
    expect(isZodLike({ type: 'object' })).toBe(false);
  });
});
