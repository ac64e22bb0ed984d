import {
  isTemplated,
  parseExpression,
  renderTemplate,
  templatedStrings,
  templateRefs,
  TemplateError,
  type TemplateScope,
} from './template';

const scope: TemplateScope = {
  inputs: {
    a: { b: 42 },
    list: [{ name: 'x' }, { name: 'y' }],
    text: 'héllo',
    flag: false,
    nothing: null,
    ключ: 'значение',
  },
  steps: {
    fetch: { outputs: { body: { items: [1, 2, 3] }, status: 200 } },
    'make-it': { outputs: { x: [{ y: 'deep' }] } },
  },
  secrets: { TOKEN: 's3cr3t', OTHER: 'o' },
};

function unresolved(fn: () => unknown): TemplateError {
  try {
    fn();
  } catch (e) {
    expect(e).toBeInstanceOf(TemplateError);
    return e as TemplateError;
  }
  throw new Error('expected a TemplateError');
}

describe('renderTemplate', () => {
  it('replaces a string that is exactly one expression by the referenced value, keeping its type', () => {
    const r = renderTemplate(
      {
        n: '${{ inputs.a.b }}',
        obj: '${{steps.fetch.outputs.body}}',
        f: '${{ inputs.flag }}',
        z: '${{ inputs.nothing }}',
        deep: '${{ steps.make-it.outputs.x[0].y }}',
      },
      scope,
    );
    expect(r.value).toEqual({ n: 42, obj: { items: [1, 2, 3] }, f: false, z: null, deep: 'deep' });
    expect(r.usedSecrets).toEqual([]);
  });

  it('stringifies expressions embedded in a longer string, objects as JSON', () => {
    const r = renderTemplate(
      'n=${{ inputs.a.b }} body=${{ steps.fetch.outputs.body }} ${{ inputs.list[1].name }}',
      scope,
    );
    expect(r.value).toBe('n=42 body={"items":[1,2,3]} y');
  });

  it('renders inside arrays and nested objects and leaves keys and non-strings alone', () => {
    const r = renderTemplate({ 'k${{ inputs.a.b }}': [1, true, null, { s: '${{ inputs.text }}!' }] }, scope);
    expect(r.value).toEqual({ 'k${{ inputs.a.b }}': [1, true, null, { s: 'héllo!' }] });
  });

  it('reports used secrets once each, sorted', () => {
    const r = renderTemplate(['${{ secrets.TOKEN }}', 'Bearer ${{ secrets.TOKEN }}', '${{ secrets.OTHER }}'], scope);
    expect(r.value).toEqual(['s3cr3t', 'Bearer s3cr3t', 'o']);
    expect(r.usedSecrets).toEqual(['OTHER', 'TOKEN']);
  });

  it('keeps $${{ as a literal ${{ and does not evaluate it', () => {
    expect(renderTemplate('$${{ inputs.a.b }} and ${{ inputs.a.b }}', scope).value).toBe('${{ inputs.a.b }} and 42');
    expect(renderTemplate('price: $${{ not closed', scope).value).toBe('price: ${{ not closed');
  });

  it('does not template a substituted value again', () => {
    const r = renderTemplate('${{ inputs.t }}', {
      inputs: { t: '${{ secrets.TOKEN }}' },
      steps: {},
      secrets: { TOKEN: 'x' },
    });
    expect(r.value).toBe('${{ secrets.TOKEN }}');
    expect(r.usedSecrets).toEqual([]);
  });

  it('fails with TEMPLATE_UNRESOLVED naming the path instead of producing undefined', () => {
    const e = unresolved(() => renderTemplate({ x: '${{ inputs.a.missing.deeper }}' }, scope));
    expect(e.code).toBe('TEMPLATE_UNRESOLVED');
    expect(e.message).toContain('inputs.a.missing');
    expect(e.details).toEqual({ expression: 'inputs.a.missing.deeper', path: ['inputs', 'a', 'missing'] });
    expect(unresolved(() => renderTemplate('${{ steps.nope.outputs.x }}', scope)).code).toBe('TEMPLATE_UNRESOLVED');
    expect(unresolved(() => renderTemplate('${{ secrets.NOPE }}', scope)).code).toBe('TEMPLATE_UNRESOLVED');
    expect(unresolved(() => renderTemplate('${{ inputs.list[2] }}', scope)).code).toBe('TEMPLATE_UNRESOLVED');
    expect(unresolved(() => renderTemplate('${{ inputs.list.length }}', scope)).code).toBe('TEMPLATE_UNRESOLVED');
  });

  it('never reaches prototypes: __proto__, constructor and prototype do not resolve', () => {
    for (const expr of [
      'steps.__proto__.outputs',
      'steps.constructor.outputs',
      'steps.fetch.outputs.constructor',
      'steps.fetch.outputs.body.__proto__',
      'inputs.constructor.prototype',
      'inputs.toString',
      'secrets.constructor',
      'secrets.__proto__',
      'inputs["__proto__"]',
    ]) {
      expect(unresolved(() => renderTemplate(`\${{ ${expr} }}`, scope)).code).toBe('TEMPLATE_UNRESOLVED');
    }
  });

  it('keeps a __proto__ key as plain data without polluting any prototype', () => {
    const value = JSON.parse('{"__proto__": {"polluted": "${{ inputs.a.b }}"}, "a": {"__proto__": {"x": 1}}}');
    const r = renderTemplate(value, scope).value as Record<string, unknown>;
    expect(Object.prototype.hasOwnProperty.call(r, '__proto__')).toBe(true);
    expect((r as { polluted?: unknown }).polluted).toBeUndefined();
    expect(({} as { polluted?: unknown }).polluted).toBeUndefined();
    expect(Object.getPrototypeOf(r)).toBe(Object.prototype);
    expect(JSON.stringify(r)).toBe('{"__proto__":{"polluted":42},"a":{"__proto__":{"x":1}}}');
  });

  it('handles unicode in keys, values and bracketed paths', () => {
    expect(renderTemplate('→ ${{ inputs["ключ"] }} ✓', scope).value).toBe('→ значение ✓');
    expect(renderTemplate('${{ inputs.ключ }}', scope).value).toBe('значение');
    expect(renderTemplate({ '😀': '${{ inputs.text }}' }, scope).value).toEqual({ '😀': 'héllo' });
  });

  it('renders nesting up to the depth limit and refuses deeper values with TEMPLATE_TOO_DEEP', () => {
    let ok: unknown = '${{ inputs.a.b }}';
    for (let i = 0; i < 100; i++) ok = [ok];
    let r = renderTemplate(ok as never, scope).value;
    for (let i = 0; i < 100; i++) r = (r as unknown[])[0] as never;
    expect(r).toBe(42);
    let deep: unknown = 'x';
    for (let i = 0; i < 10_000; i++) deep = { d: deep };
    expect(unresolved(() => renderTemplate(deep as never, scope)).code).toBe('TEMPLATE_TOO_DEEP');
  });

  it('rejects malformed expressions with TEMPLATE_INVALID', () => {
    for (const s of [
      '${{ }}',
      '${{ inputs.a + 1 }}',
      '${{ process.env.X }}',
      '${{ steps.a.b }}',
      '${{ secrets }}',
      '${{ inputs.a',
      '${{ inputs..a }}',
      '${{ inputs.a() }}',
    ]) {
      expect(unresolved(() => renderTemplate(s, scope)).code).toBe('TEMPLATE_INVALID');
    }
  });
});

describe('templateRefs', () => {
  it('lists every reference in document order', () => {
    expect(
      templateRefs({
        a: '${{ inputs.x }}',
        b: ['${{ steps.s1.outputs.y[0] }} and ${{ secrets.K }}'],
        c: '$${{ inputs.literal }}',
        d: 3,
      }),
    ).toEqual([
      { kind: 'inputs', path: ['x'] },
      { kind: 'steps', path: ['s1', 'outputs', 'y', '0'] },
      { kind: 'secrets', path: ['K'] },
    ]);
  });

  it('parses bracketed string keys with escapes', () => {
    expect(parseExpression(`inputs["a.b"]['c\\'d']`)).toEqual({ kind: 'inputs', path: ['a.b', "c'd"] });
  });

  it('tells templated strings from plain and escaped ones', () => {
    expect(isTemplated('${{ inputs.a }}')).toBe(true);
    expect(isTemplated('x $${{ inputs.a }} y ${{ inputs.b }}')).toBe(true);
    expect(isTemplated('$${{ inputs.a }}')).toBe(false);
    expect(isTemplated('plain')).toBe(false);
  });
});

describe('templatedStrings', () => {
  it('gives each templated string its path, references and whether it renders as the value itself', () => {
    const value = {
      a: '${{ inputs.a.b }}',
      list: ['plain', 'n=${{ inputs.a.b }}', ' ${{ inputs.a.b }}', '$${{ inputs.x }}'],
      deep: { s: '${{ secrets.K }}${{ steps.fetch.outputs.status }}' },
    };
    expect(templatedStrings(value)).toEqual([
      { path: ['a'], refs: [{ ref: { kind: 'inputs', path: ['a', 'b'] }, expression: 'inputs.a.b' }], whole: true },
      { path: ['list', '1'], refs: [expect.objectContaining({ expression: 'inputs.a.b' })], whole: false },
      { path: ['list', '2'], refs: [expect.objectContaining({ expression: 'inputs.a.b' })], whole: false },
      { path: ['deep', 's'], refs: [expect.anything(), expect.anything()], whole: false },
    ]);
    // Whole means what rendering does: the value keeps its type exactly when `whole` is true.
    for (const t of templatedStrings(value)) {
      const rendered = renderTemplate(value, { ...scope, secrets: { K: 'k' } }).value as Record<string, unknown>;
      const at = t.path.reduce<unknown>((v, k) => (v as Record<string, unknown>)[k], rendered);
      expect(typeof at === 'number').toBe(t.whole);
    }
    expect(() => templatedStrings({ x: '${{ inputs.a' })).toThrow(TemplateError);
  });
});
