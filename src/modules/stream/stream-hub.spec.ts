import { compareCursor, formatCursor, parseCursor } from './stream-cursor';
import { clientMessage } from './stream.dto';
import { matches, toStreamEvent } from './stream-hub';
import type { StreamEventRow } from './stream.repository';

const row = (type: string, extra: Partial<StreamEventRow> = {}): StreamEventRow => ({
  stream_xid: '900',
  stream_id: '17',
  run_id: '7b0e0c1e-3a3c-4a53-9d0a-0a4a3c0f4b11',
  seq: 3,
  type,
  step_id: null,
  attempt: null,
  created_at: new Date('2026-01-10T00:00:00Z'),
  data: {},
  dag_id: 'etl',
  trace_id: 'ab'.repeat(16),
  ...extra,
});

describe('stream cursor', () => {
  it('round-trips and orders by transaction id, then event id', () => {
    const a = parseCursor('900-17')!;
    expect(formatCursor(a)).toBe('900-17');
    expect(compareCursor(a, parseCursor('900-18')!)).toBe(-1);
    expect(compareCursor(parseCursor('901-1')!, a)).toBe(1);
    expect(compareCursor(a, parseCursor('900-17')!)).toBe(0);
  });

  it('rejects anything that is not <xid>-<id>', () => {
    for (const s of ['', '1', '1-', '-1', 'a-1', '1-2-3', '1.5-2', '99999999999999999999999-1'])
      expect(parseCursor(s)).toBeUndefined();
  });
});

describe('stream events', () => {
  it('maps stored event types to the stream vocabulary with a status', () => {
    const cases: [string, string, string | null][] = [
      ['run.created', 'run.updated', 'queued'],
      ['run.running', 'run.started', 'running'],
      ['run.succeeded', 'run.completed', 'succeeded'],
      ['run.failed', 'run.failed', 'failed'],
      ['run.cancelled', 'run.cancelled', 'cancelled'],
      ['run.replayed', 'run.updated', null],
      ['step.retrying', 'step.updated', 'retrying'],
    ];
    for (const [type, event, status] of cases) {
      expect(toStreamEvent('t', row(type), '900-17')).toMatchObject({
        event,
        status,
        eventType: type,
        cursor: '900-17',
        tenant: 't',
        dagId: 'etl',
      });
    }
  });

  it('matches filters on dagId, runId and status together', () => {
    const e = toStreamEvent('t', row('run.failed'), '1-1');
    expect(matches({}, e)).toBe(true);
    expect(matches({ dagId: 'etl', status: ['failed'] }, e)).toBe(true);
    expect(matches({ dagId: 'other' }, e)).toBe(false);
    expect(matches({ status: ['succeeded'] }, e)).toBe(false);
    expect(matches({ runId: '00000000-0000-4000-8000-000000000000' }, e)).toBe(false);
  });

  it('validates client messages strictly', () => {
    expect(clientMessage.safeParse({ type: 'subscribe', id: 'a' }).success).toBe(true);
    expect(clientMessage.safeParse({ type: 'subscribe', id: 'a', filter: { runId: 'x' } }).success).toBe(false);
    expect(clientMessage.safeParse({ type: 'subscribe', id: 'a b' }).success).toBe(false);
    expect(clientMessage.safeParse({ type: 'subscribe', id: 'a', filter: { colour: 'red' } }).success).toBe(false);
    expect(clientMessage.safeParse({ type: 'auth', token: 't', tenantId: 'Bad Tenant' }).success).toBe(false);
    expect(clientMessage.safeParse({ type: 'auth', token: 't', tenantId: 'acme', since: 'nope' }).success).toBe(false);
  });
});
