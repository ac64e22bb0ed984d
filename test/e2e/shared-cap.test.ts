import pg from 'pg';
import { RunsService } from '../../src/modules/runs/runs.service';
import { startTestApp, type TestApp } from '../support/test-app';
import { publishDag, waitForRun } from './runs-support';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * A tenant alone may have ORDO_TENANT_MAX_IN_FLIGHT steps in flight; while another tenant has work
 * (seen by the worker within ORDO_TENANT_SHARED_WINDOW_MS, 1 s here), each is held to
 * ORDO_TENANT_SHARED_IN_FLIGHT, and the busy tenant gets its full cap back once the other has been
 * quiet for that long.
 */
describe('the shared cap on steps in flight (api + worker)', () => {
  let app: TestApp;
  let owner: pg.Client;
  let busy: { tenantId: string; token: string };
  let quiet: { tenantId: string; token: string };

  beforeAll(async () => {
    app = await startTestApp({
      ORDO_ROLES: 'api,worker',
      ORDO_WORKER_CONCURRENCY: '16',
      ORDO_TENANT_MAX_IN_FLIGHT: '64',
      ORDO_TENANT_SHARED_IN_FLIGHT: '4',
      ORDO_TENANT_SHARED_WINDOW_MS: '1000',
    });
    owner = new pg.Client({ connectionString: app.testDb.ownerUrl });
    await owner.connect();
    busy = await app.tenant('busy-share', ['orchestrator:admin']);
    quiet = await app.tenant('quiet-share', ['orchestrator:admin']);
    for (const t of [busy, quiet])
      await publishDag(app, t.tenantId, { id: 'nap', steps: [{ id: 'x', plugin: 'noop', with: { sleepMs: 100 } }] });
  });
  afterAll(async () => {
    await owner.end();
    await app.close();
  });

  /** The most steps of the busy tenant in flight (its leased queue items) seen over `ms`, sampled every 10 ms. */
  const mostInFlight = async (ms: number) => {
    let most = 0;
    for (const end = Date.now() + ms; Date.now() < end; await sleep(10)) {
      const r = await owner.query<{ n: number }>(
        `select count(*)::int as n from queue_item where tenant_id = $1 and state = 'leased'`,
        [busy.tenantId],
      );
      most = Math.max(most, r.rows[0].n);
    }
    return most;
  };
  const busyQueued = async () =>
    (
      await owner.query<{ n: number }>(`select count(*)::int as n from queue_item where tenant_id = $1`, [
        busy.tenantId,
      ])
    ).rows[0].n;

  it('holds a busy tenant to the shared cap while another tenant has work, and gives the full cap back after', async () => {
    const runs = app.ordo.app.get(RunsService);
    await runs.createRuns(
      busy.tenantId,
      Array.from({ length: 800 }, (_, k) => ({ dagId: 'nap', inputs: {}, runToken: `b${k}`, requestedBy: 'test' })),
    );
    // Alone: as many as the worker holds (its 16 slots and the steps it claims ahead), under the cap of 64.
    const alone = await mostInFlight(600);
    expect(alone).toBeGreaterThan(16);

    // The quiet tenant starts a run every 100 ms for 2 s. The busy tenant's steps already in flight
    // (64, 100 ms each on 16 slots) end within about 400 ms, and from then on it has at most the
    // shared cap in flight: a soft cap, as the full one is, which two claims under way at once may
    // each fill (seen here: 4, at times 8).
    const quietRuns: string[] = [];
    const sharing = (async () => {
      for (let k = 0; k < 20; k++) {
        const r = await app.request('POST', '/api/v1/runs', {
          as: quiet,
          body: { dagId: 'nap', inputs: {}, runToken: `q${k}` },
        });
        expect(r.status).toBe(201);
        quietRuns.push(r.body.runId as string);
        await sleep(100);
      }
    })();
    await sleep(700);
    const shared = await mostInFlight(1_000);
    await sharing;
    expect(shared).toBeGreaterThan(0);
    expect(shared).toBeLessThanOrEqual(2 * 4);
    for (const id of quietRuns) expect((await waitForRun(app, quiet, id)).status).toBe('succeeded');

    // A window after the quiet tenant's last step, the busy tenant has its full cap again.
    await sleep(1_300);
    expect(await busyQueued()).toBeGreaterThan(64);
    expect(await mostInFlight(600)).toBeGreaterThan(16);
  });

  it("loses none of the busy tenant's runs to the change of cap", async () => {
    // The busy tenant's remaining runs drain, with the full cap: none of them is lost.
    const deadline = Date.now() + 30_000;
    while ((await busyQueued()) > 0 && Date.now() < deadline) await sleep(100);
    expect(await busyQueued()).toBe(0);
    const r = await owner.query<{ status: string; n: number }>(
      `select status, count(*)::int as n from run where tenant_id = $1 group by status`,
      [busy.tenantId],
    );
    expect(r.rows).toEqual([{ status: 'succeeded', n: 800 }]);
  });
});
