import { metrics } from './metrics';
import { observeCommittedEvents } from './run-observer';

describe('observeCommittedEvents', () => {
  it('counts finished runs by status and step retries', async () => {
    const before = async (tenant: string, status: string) =>
      (await metrics.runsTotal.get()).values.find((v) => v.labels.tenant === tenant && v.labels.status === status)
        ?.value ?? 0;
    const retries = async (tenant: string) =>
      (await metrics.stepRetriesTotal.get()).values.find((v) => v.labels.tenant === tenant)?.value ?? 0;
    const runs0 = await before('obs', 'failed');
    const retries0 = await retries('obs');
    observeCommittedEvents(
      [
        { tenantId: 'obs', runId: 'r1', type: 'run.running' },
        { tenantId: 'obs', runId: 'r1', type: 'step.retrying' },
        { tenantId: 'obs', runId: 'r1', type: 'step.retrying' },
        { tenantId: 'obs', runId: 'r1', type: 'run.failed' },
        { tenantId: 'obs', runId: 'r2', type: 'step.succeeded' },
      ],
      () => ({ dagId: 'd', traceId: 'ab'.repeat(16), startedAt: null }),
      new Date(),
    );
    expect(await before('obs', 'failed')).toBe(runs0 + 1);
    expect(await retries('obs')).toBe(retries0 + 2);
  });
});
