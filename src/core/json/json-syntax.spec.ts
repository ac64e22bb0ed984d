import fc from 'fast-check';
import { jsonSyntaxError } from './json-syntax';

/** The position JSON.parse names, when its message names one. */
function v8Position(text: string): { line: number; column: number } | undefined {
  try {
    JSON.parse(text);
    return undefined;
  } catch (e) {
    const m = /\(line (\d+) column (\d+)\)/.exec((e as Error).message);
    return m ? { line: Number(m[1]), column: Number(m[2]) } : undefined;
  }
}

const parses = (text: string): boolean => {
  try {
    JSON.parse(text);
    return true;
  } catch {
    return false;
  }
};

describe('jsonSyntaxError', () => {
  it.each([
    ['{bad', 1, 2, `expected a double-quoted property name, found "b"`],
    ['{"scopes": ["orchestrator:read"]', 1, 33, 'unexpected end of input'],
    ['null garbage', 1, 6, 'expected the end of input after the JSON value, found "g"'],
    ['{"a":1,}', 1, 8, 'expected a double-quoted property name, found "}"'],
    ['{"a":\n  tru}', 2, 6, 'expected "true", found "}"'],
    ['\n\n  {"a" 1}', 3, 8, `expected ':' after a property name, found "1"`],
    ['{"a":01}', 1, 7, `expected ',' or '}', found "1"`],
    ['{"a": "x\\q"}', 1, 10, 'bad escape in a string'],
    ['{"a":"\\u12G4"}', 1, 11, 'bad \\u escape in a string'],
    ['"a\u0001"', 1, 3, 'unescaped control character in a string'],
    ['"abc', 1, 5, 'unterminated string'],
    ['[-]', 1, 3, 'no digit after the minus sign'],
    ['1.', 1, 3, 'no digit after the decimal point'],
    ['1e+', 1, 4, 'no digit in the exponent'],
    ['[1,]', 1, 4, 'expected a value, found "]"'],
    ['[1,2]]', 1, 6, 'expected the end of input after the JSON value, found "]"'],
    ['  ', 1, 3, 'unexpected end of input'],
    ['x'.repeat(100), 1, 1, 'expected a value, found "x"'],
  ])('locates the error in %p at line %i, column %i', (text, line, column, reason) => {
    expect(jsonSyntaxError(text)).toMatchObject({ line, column, reason });
  });

  it('accepts valid JSON, with a leading byte order mark too', () => {
    for (const text of ['{}', '[]', '0', '-0.5e+10', '"\\u00e9\\n"', ' {"a":[1,{"b":null}],"c":true} ', '\ufeff{}']) {
      expect({ text, error: jsonSyntaxError(text) }).toEqual({ text, error: undefined });
    }
  });

  it('finds an error in JSON nested a million levels deep without recursion', () => {
    const n = 1_000_000;
    expect(jsonSyntaxError(`${'['.repeat(n)}${']'.repeat(n)}`)).toBeUndefined();
    expect(jsonSyntaxError(`${'['.repeat(n)}${']'.repeat(n - 1)}}`)).toMatchObject({ column: 2 * n });
  });

  it('agrees with JSON.parse on validity, and on the position wherever JSON.parse names one', () => {
    const jsonish = fc.oneof(
      fc.json({ maxDepth: 3 }),
      fc.string({ unit: fc.constantFrom(...'{}[]:,"\\ntrufalse0123456789.eE+-u \n\t'.split('')), maxLength: 40 }),
      fc
        .tuple(fc.json({ maxDepth: 3 }), fc.nat(), fc.string({ maxLength: 3 }))
        .map(([t, at, insert]) => t.slice(0, at % (t.length + 1)) + insert + t.slice(at % (t.length + 1))),
    );
    fc.assert(
      fc.property(jsonish, (text) => {
        // The body parser skips a leading byte order mark; JSON.parse refuses it.
        fc.pre(!text.startsWith('\ufeff'));
        const error = jsonSyntaxError(text);
        expect({ text, valid: error === undefined }).toEqual({ text, valid: parses(text) });
        const v8 = v8Position(text);
        if (v8) expect({ text, line: error?.line, column: error?.column }).toEqual({ text, ...v8 });
      }),
      { numRuns: 2000 },
    );
  });
});
