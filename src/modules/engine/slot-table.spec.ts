import { SlotTable } from './slot-table';

describe('engine: the table of running steps', () => {
  it('keeps entries by key, counts them, and forgets deleted ones', () => {
    const t = new SlotTable<number>();
    expect(t.size).toBe(0);
    t.set('a/r1/s1', 1).set('a/r1/s2', 2);
    t.set('a/r1/s1', 3);
    expect(t.size).toBe(2);
    expect(t.get('a/r1/s1')).toBe(3);
    expect(t.delete('a/r1/s2')).toBe(true);
    expect(t.delete('a/r1/s2')).toBe(false);
    expect(t.get('a/r1/s2')).toBeUndefined();
    expect(t.size).toBe(1);
    expect(t.values()).toEqual([3]);
    expect(t.entries()).toEqual([['a/r1/s1', 3]]);
  });

  it('takes any string as a key, those of Object.prototype included', () => {
    const t = new SlotTable<string>();
    expect(t.get('constructor')).toBeUndefined();
    expect(t.delete('toString')).toBe(false);
    t.set('__proto__', 'p').set('constructor', 'c').set('hasOwnProperty', 'h');
    expect(t.size).toBe(3);
    expect(t.get('__proto__')).toBe('p');
    expect(t.get('constructor')).toBe('c');
    expect(Object.fromEntries(t.entries())).toEqual({ ['__proto__']: 'p', constructor: 'c', hasOwnProperty: 'h' });
    expect(t.delete('__proto__')).toBe(true);
    expect(t.size).toBe(2);
  });

  it('stays consistent through many entries coming and going', () => {
    const t = new SlotTable<number>();
    const live = new Set<string>();
    for (let i = 0; i < 20_000; i++) {
      t.set(`k${i}`, i);
      live.add(`k${i}`);
      if (i % 3 !== 0) {
        const k = `k${i - (i % 7)}`;
        expect(t.delete(k)).toBe(live.delete(k));
      }
    }
    expect(t.size).toBe(live.size);
    expect(new Set(t.entries().map(([k]) => k))).toEqual(live);
  });
});
