import { sql } from 'kysely';
import { JobRunnerService } from '../../src/modules/engine/job-runner.service';
import { startTestApp, type TestApp } from '../support/test-app';
import { publishDag, waitForRun } from './runs-support';

/**
 * graphile-worker's runner stops for good when its batcher loses the connection while recording a
 * job's result (a database restart). The engine's retry timers must not stop with it.
 */
describe('job runner supervision', () => {
  let app: TestApp;
  let as: { token: string; tenantId: string };

  beforeAll(async () => {
    app = await startTestApp({ ORDO_ROLES: 'api,worker' });
    as = { token: app.adminToken, tenantId: app.tenantId };
    await publishDag(app, app.tenantId, {
      id: 'retried',
      steps: [
        {
          id: 'flaky',
          plugin: 'noop',
          with: { fail: true, retryable: true },
          retry: { maxRetries: 2, initialDelay: 50 },
        },
      ],
    });
  });
  afterAll(async () => {
    await app.close();
  });

  it('starts a runner that stopped on its own again, so retry timers keep firing, and shuts down cleanly', async () => {
    const jobs = app.ordo.app.get(JobRunnerService, { strict: false });
    const runner = (jobs as unknown as { runner: { stop(): Promise<void> } | null }).runner;
    expect(runner).not.toBeNull();
    // What graphile-worker does after its batcher gave up: the runner stops while Ordo runs on.
    await runner!.stop();
    const r = await app.request('POST', '/api/v1/runs', {
      as,
      body: { dagId: 'retried', inputs: {}, runToken: 'after-stop' },
    });
    expect(r.status).toBe(201);
    // Both retries ran (each one a timer job), so the runner came back.
    const run = await waitForRun(app, as, r.body.runId);
    expect(run.status).toBe('failed');
    const at = await app.request('GET', `/api/v1/runs/${r.body.runId}/steps/flaky/attempts`, { as });
    expect(at.body.items.map((a: { attempt: number }) => a.attempt)).toEqual([1, 2, 3]);
    expect((jobs as unknown as { runner: unknown }).runner).not.toBe(runner);
  });

  it('releases the jobs a stopped runner held when it starts again, instead of hours later', async () => {
    const jobs = app.ordo.app.get(JobRunnerService, { strict: false });
    const held = async () =>
      (
        await app.ordo.database.withSystem((tx) =>
          sql<{ n: number }>`select count(*)::int as n from graphile_worker._private_jobs
            where key = 'held-by-stopped-runner'`.execute(tx),
        )
      ).rows[0].n;
    // A job locked by the running runner's worker, as one it was running when its connection went.
    const workerId = (
      await app.ordo.database.withSystem((tx) =>
        sql<{ id: string }>`select graphile_worker.add_job('ordo.engine.retry_step',
            json_build_object('tenantId', ${app.tenantId}::text, 'runId', gen_random_uuid(), 'stepId', 'gone', 'attempt', 1),
            job_key => 'held-by-stopped-runner', run_at => now() + interval '1 hour') as id`.execute(tx),
      )
    ).rows[0].id;
    expect(workerId).toBeTruthy();
    const ids = jobs.workerIds();
    expect(ids.length).toBeGreaterThan(0);
    await app.ordo.database.withSystem((tx) =>
      sql`update graphile_worker._private_jobs set locked_at = now(), locked_by = ${ids[0]}, run_at = now()
        where key = 'held-by-stopped-runner'`.execute(tx),
    );
    const runner = (jobs as unknown as { runner: { stop(): Promise<void> } | null }).runner;
    await runner!.stop();
    // The restarted runner releases it and runs it (a requeue of a step that does not exist: done).
    const deadline = Date.now() + 15_000;
    while ((await held()) > 0 && Date.now() < deadline) await new Promise((res) => setTimeout(res, 100));
    expect(await held()).toBe(0);
  });
});
