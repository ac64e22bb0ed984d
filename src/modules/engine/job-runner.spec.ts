import { retryWhileDisconnected } from './job-runner.service';

describe('retryWhileDisconnected', () => {
  it('tries again while the database is unreachable, then returns the result', async () => {
    let calls = 0;
    const lost = [
      Object.assign(new Error('terminating connection due to administrator command'), { code: '57P01' }),
      Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' }),
      new Error('Connection terminated unexpectedly'),
    ];
    const v = await retryWhileDisconnected(async () => {
      if (calls < lost.length) throw lost[calls++];
      return 'done';
    }, 10_000);
    expect(v).toBe('done');
    expect(calls).toBe(3);
  });

  it('lets any other error through at once', async () => {
    let calls = 0;
    await expect(
      retryWhileDisconnected(async () => {
        calls++;
        throw Object.assign(new Error('duplicate key'), { code: '23505' });
      }),
    ).rejects.toThrow('duplicate key');
    expect(calls).toBe(1);
  });

  it('gives up once its time budget is spent', async () => {
    let calls = 0;
    await expect(
      retryWhileDisconnected(async () => {
        calls++;
        throw Object.assign(new Error('the database system is shutting down'), { code: '57P03' });
      }, 600),
    ).rejects.toThrow('shutting down');
    expect(calls).toBeGreaterThanOrEqual(2);
  });
});
