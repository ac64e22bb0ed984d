import { createHash } from 'node:crypto';
import { chain, verifyChain } from './run-events';

describe('run event chain', () => {
  const at = new Date('2026-01-02T03:04:05.678Z');
  const events = chain(
    't',
    'r',
    { seq: 0, hash: '' },
    [
      { type: 'run.created', actor: 'alice', data: { b: 2, a: 1 } },
      { type: 'step.queued', stepId: 's', actor: 'engine' },
    ],
    at,
  );

  it('numbers events from the last seq and links each hash to the previous one', () => {
    expect(events.map((e) => [e.seq, e.prevHash === '' ? '' : 'prev'])).toEqual([
      [1, ''],
      [2, 'prev'],
    ]);
    expect(events[1].prevHash).toBe(events[0].hash);
    const body =
      '{"actor":"alice","attempt":null,"createdAt":"2026-01-02T03:04:05.678Z","data":{"a":1,"b":2},"runId":"r","seq":1,"stepId":null,"type":"run.created"}';
    expect(events[0].hash).toBe(createHash('sha256').update(body).digest('hex'));
    expect(verifyChain(events)).toEqual({ ok: true });
  });

  it('continues a chain after its last event', () => {
    const more = chain('t', 'r', { seq: 2, hash: events[1].hash }, [{ type: 'run.cancelled', actor: 'bob' }], at);
    expect(verifyChain([...events, ...more])).toEqual({ ok: true });
  });

  it('detects an edited, dropped or reordered event', () => {
    expect(verifyChain([{ ...events[0], actor: 'mallory' }, events[1]]).ok).toBe(false);
    expect(verifyChain([events[1]]).ok).toBe(false);
    expect(verifyChain([events[1], events[0]]).ok).toBe(false);
  });
});
