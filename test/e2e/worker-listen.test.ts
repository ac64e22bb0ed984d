import pg from 'pg';
import { startTestApp, type TestApp } from '../support/test-app';
import { publishDag, waitForRun } from './runs-support';

describe("the worker's notification connection", () => {
  let app: TestApp;
  let owner: pg.Client;
  beforeAll(async () => {
    app = await startTestApp({ ORDO_ROLES: 'api,worker' });
    owner = new pg.Client({ connectionString: app.testDb.ownerUrl });
    await owner.connect();
  });
  afterAll(async () => {
    await owner.end();
    await app.close();
  });

  const listeners = async () =>
    Number(
      (
        await owner.query<{ n: string }>(
          `select count(*) as n from pg_stat_activity where datname = current_database() and application_name = 'ordo:worker-listen'`,
        )
      ).rows[0].n,
    );

  it('reconnects once per terminated connection, never piling connections up, and keeps serving runs', async () => {
    for (let i = 0; i < 8; i++) {
      await owner.query(
        `select pg_terminate_backend(pid) from pg_stat_activity where datname = current_database() and application_name = 'ordo:worker-listen'`,
      );
      await new Promise((r) => setTimeout(r, 150));
    }
    const deadline = Date.now() + 15_000;
    while ((await listeners()) !== 1 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
    expect(await listeners()).toBe(1);

    const as = { token: app.adminToken, tenantId: app.tenantId };
    await publishDag(app, app.tenantId, {
      id: 'after-loss',
      steps: [{ id: 'a', plugin: 'noop', with: { output: { ok: true } } }],
    });
    const r = await app.request('POST', '/api/v1/runs', {
      as,
      body: { dagId: 'after-loss', inputs: {}, runToken: 'x' },
    });
    expect(r.status).toBe(201);
    expect((await waitForRun(app, as, r.body.runId as string)).status).toBe('succeeded');
    expect(await listeners()).toBe(1);
  });
});
