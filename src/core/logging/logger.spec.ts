import { Writable } from 'node:stream';
import { createRootLogger, scrubText } from './logger';
import { withLogContext } from './log-context';

function capture(): { lines: () => Record<string, unknown>[]; raw: () => string; dest: Writable } {
  let buf = '';
  const dest = new Writable({
    write(chunk: Buffer, _enc, done) {
      buf += chunk.toString('utf8');
      done();
    },
  });
  return {
    dest,
    raw: () => buf,
    lines: () =>
      buf
        .split('\n')
        .filter(Boolean)
        .map((l) => JSON.parse(l) as Record<string, unknown>),
  };
}

const JWT = 'eyJhbGciOiJFZERTQSJ9.eyJzdWIiOiJhZG1pbiIsInRpZCI6ImEifQ.c2lnbmF0dXJlLXZhbHVl';

describe('logger', () => {
  it('never writes an Authorization header, a token or a secret value', () => {
    const c = capture();
    const log = createRootLogger('info', c.dest);
    log.info({ req: { headers: { authorization: `Bearer ${JWT}` } } }, 'request');
    log.info({ headers: { Authorization: `Bearer ${JWT}` } }, 'outgoing call');
    log.info({ step: { secret: 'hunter2-secret-value', config: { password: 'pw-value-1' } } }, 'step');
    log.info({ token: JWT, apiKey: 'key-value-9' }, 'minted');
    log.warn(`retrying with Authorization: Bearer ${JWT}`);
    const raw = c.raw();
    expect(c.lines()).toHaveLength(5);
    for (const needle of [JWT, 'hunter2-secret-value', 'pw-value-1', 'key-value-9']) expect(raw).not.toContain(needle);
    expect(raw).toContain('[redacted]');
  });

  it('adds trace_id, tenant, dagId, runId and stepId from the log context', () => {
    const c = capture();
    const log = createRootLogger('info', c.dest);
    withLogContext({ tenant: 'acme', dagId: 'etl', runId: 'r-1', trace_id: 'a'.repeat(32) }, () => {
      withLogContext({ stepId: 'extract' }, () => log.info('inside'));
    });
    log.info('outside');
    const [inside, outside] = c.lines();
    expect(inside).toMatchObject({
      tenant: 'acme',
      dagId: 'etl',
      runId: 'r-1',
      stepId: 'extract',
      trace_id: 'a'.repeat(32),
    });
    expect(outside.tenant).toBeUndefined();
    expect(outside.stepId).toBeUndefined();
  });

  it('scrubs bearer tokens and JWTs from free text', () => {
    expect(scrubText(`Bearer ${JWT} and ${JWT}`)).toBe('Bearer [redacted] and [redacted]');
    expect(scrubText('plain text')).toBe('plain text');
  });
});
