/** Where a JSON text first breaks RFC 8259's grammar, and why. */
export interface JsonSyntaxError {
  /** Offset in UTF-16 code units. */
  offset: number;
  /** 1-based, counted by line feeds. */
  line: number;
  /** 1-based, in UTF-16 code units, as V8 counts them. */
  column: number;
  reason: string;
}

type State = 'value' | 'value-or-close' | 'key' | 'key-or-close' | 'colon' | 'after-value';

const HEX = /^[0-9a-fA-F]$/;
const LITERALS = ['true', 'false', 'null'];

/**
 * The first syntax error of a JSON text, or undefined when it is valid JSON (a leading byte order
 * mark is skipped, as the body parser does). JSON.parse's messages name a position only for some
 * errors and change between V8 versions; this scan names one for every error. It runs without
 * recursion, so hostile nesting cannot exhaust the stack.
 */
export function jsonSyntaxError(text: string): JsonSyntaxError | undefined {
  const closers: ('}' | ']')[] = [];
  let i = text.charCodeAt(0) === 0xfeff ? 1 : 0;
  let state: State = 'value';
  const fail = (at: number, reason: string): JsonSyntaxError => ({ ...positionOf(text, at), reason });
  const unexpected = (at: number, wanted: string): JsonSyntaxError =>
    fail(at, `expected ${wanted}, found ${JSON.stringify(String.fromCodePoint(text.codePointAt(at)!))}`);

  /** Reads the string starting at `i` (a quote); an error, or undefined with `i` past its closing quote. */
  const string = (): JsonSyntaxError | undefined => {
    i++;
    for (;;) {
      if (i >= text.length) return fail(i, 'unterminated string');
      const c = text.charCodeAt(i);
      if (c === 0x22) {
        i++;
        return undefined;
      }
      if (c < 0x20) return fail(i, 'unescaped control character in a string');
      if (c !== 0x5c) {
        i++;
      } else if (i + 1 >= text.length) {
        return fail(i + 1, 'unterminated string');
      } else if (text[i + 1] === 'u') {
        for (let d = i + 2; d < i + 6; d++) {
          if (d >= text.length) return fail(d, 'unterminated string');
          if (!HEX.test(text[d])) return fail(d, 'bad \\u escape in a string');
        }
        i += 6;
      } else if ('"\\/bfnrt'.includes(text[i + 1])) {
        i += 2;
      } else {
        return fail(i + 1, 'bad escape in a string');
      }
    }
  };

  /** Reads the number starting at `i`; an error, or undefined with `i` past it. */
  const number = (): JsonSyntaxError | undefined => {
    if (text[i] === '-') i++;
    if (!isDigit(text[i])) return fail(i, 'no digit after the minus sign');
    if (text[i] === '0') i++;
    else while (isDigit(text[i])) i++;
    if (text[i] === '.') {
      i++;
      if (!isDigit(text[i])) return fail(i, 'no digit after the decimal point');
      while (isDigit(text[i])) i++;
    }
    if (text[i] === 'e' || text[i] === 'E') {
      i++;
      if (text[i] === '+' || text[i] === '-') i++;
      if (!isDigit(text[i])) return fail(i, 'no digit in the exponent');
      while (isDigit(text[i])) i++;
    }
    return undefined;
  };

  /** Reads `true`, `false` or `null` at `i`; an error at the first character that departs from them. */
  const literal = (): JsonSyntaxError | undefined => {
    const word = LITERALS.find((w) => w[0] === text[i]);
    if (!word) return unexpected(i, 'a value');
    for (let k = 1; k < word.length; k++) {
      if (i + k >= text.length) return fail(i + k, 'unexpected end of input');
      if (text[i + k] !== word[k]) return unexpected(i + k, `"${word}"`);
    }
    i += word.length;
    return undefined;
  };

  for (;;) {
    while (i < text.length && (text[i] === ' ' || text[i] === '\t' || text[i] === '\n' || text[i] === '\r')) i++;
    if (i >= text.length) {
      return state === 'after-value' && closers.length === 0 ? undefined : fail(i, 'unexpected end of input');
    }
    const ch = text[i];
    switch (state) {
      case 'value':
      case 'value-or-close': {
        if (state === 'value-or-close' && ch === ']') {
          closers.pop();
          i++;
          state = 'after-value';
          break;
        }
        state = 'after-value';
        if (ch === '{') {
          closers.push('}');
          i++;
          state = 'key-or-close';
        } else if (ch === '[') {
          closers.push(']');
          i++;
          state = 'value-or-close';
        } else if (ch === '"') {
          const e = string();
          if (e) return e;
        } else if (ch === '-' || isDigit(ch)) {
          const e = number();
          if (e) return e;
        } else {
          const e = literal();
          if (e) return e;
        }
        break;
      }
      case 'key':
      case 'key-or-close': {
        if (state === 'key-or-close' && ch === '}') {
          closers.pop();
          i++;
          state = 'after-value';
          break;
        }
        if (ch !== '"') return unexpected(i, 'a double-quoted property name');
        const e = string();
        if (e) return e;
        state = 'colon';
        break;
      }
      case 'colon':
        if (ch !== ':') return unexpected(i, "':' after a property name");
        i++;
        state = 'value';
        break;
      case 'after-value': {
        const closer = closers.at(-1);
        if (closer === undefined) return unexpected(i, 'the end of input after the JSON value');
        if (ch === ',') {
          i++;
          state = closer === '}' ? 'key' : 'value';
        } else if (ch === closer) {
          closers.pop();
          i++;
        } else {
          return unexpected(i, `',' or '${closer}'`);
        }
        break;
      }
    }
  }
}

function isDigit(c: string | undefined): boolean {
  return c !== undefined && c >= '0' && c <= '9';
}

function positionOf(text: string, offset: number): { offset: number; line: number; column: number } {
  let line = 1;
  let lineStart = 0;
  for (let at = text.indexOf('\n'); at !== -1 && at < offset; at = text.indexOf('\n', at + 1)) {
    line++;
    lineStart = at + 1;
  }
  return { offset, line, column: offset - lineStart + 1 };
}
