import { parseSize } from './worker-names';

describe('parseSize', () => {
  it('reads binary and decimal units, with or without ">="', () => {
    expect(parseSize('16GiB')).toBe(16 * 1024 ** 3);
    expect(parseSize('>=16GiB')).toBe(16 * 1024 ** 3);
    expect(parseSize('>= 512 MiB')).toBe(512 * 1024 ** 2);
    expect(parseSize('1.5GB')).toBe(1_500_000_000);
    expect(parseSize('100B')).toBe(100);
  });

  it('refuses what is not a size', () => {
    expect(() => parseSize('16')).toThrow('not a size');
    expect(() => parseSize('<=16GiB')).toThrow('not a size');
    expect(() => parseSize('lots')).toThrow('not a size');
  });
});
