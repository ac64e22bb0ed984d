import { canonicalJson } from '../../core/json/canonical-json';
import { ExportWriter, formatLine, lineHash, redactSecrets, splitLine } from './export-format';

describe('export format', () => {
  it('writes canonical lines chained by lineHash and counts them', () => {
    const w = new ExportWriter('acme', { from: null, to: null, dagId: null });
    const l1 = w.line({ type: 'run', runId: 'r', b: 2, a: 1 });
    const l2 = w.line({ type: 'metric', runId: 'r', name: 'x', value: 1 });
    const h1 = lineHash('', canonicalJson({ type: 'run', runId: 'r', b: 2, a: 1 }));
    expect(l1).toBe(`{"a":1,"b":2,"runId":"r","type":"run","lineHash":"${h1}"}\n`);
    const parsed = splitLine(l2.trimEnd());
    expect(parsed.exact).toBe(true);
    expect(parsed.lineHash).toBe(lineHash(h1, parsed.canonical));
    const m = w.manifest();
    expect(m.counts).toMatchObject({ run: 1, metric: 1, event: 0 });
    expect(m.lines).toBe(2);
    expect(m.lastLineHash).toBe(parsed.lineHash);
  });

  it('detects a line that is not byte-for-byte in export form', () => {
    const good = formatLine('{"a":1,"type":"run"}', 'f'.repeat(64));
    expect(splitLine(good).exact).toBe(true);
    expect(splitLine(good.replace('{"a":1', '{ "a":1')).exact).toBe(false);
    expect(splitLine(good.replace('"a":1', '"a":1.0')).exact).toBe(false);
  });

  it('redacts values of keys named like credentials, at any depth', () => {
    expect(
      redactSecrets({ url: 'u', headers: { Authorization: 'Bearer x', 'x-api-key': 'k' }, list: [{ password: 'p' }] }),
    ).toEqual({
      url: 'u',
      headers: { Authorization: '[redacted]', 'x-api-key': '[redacted]' },
      list: [{ password: '[redacted]' }],
    });
  });
});
