import { spawnSync } from 'node:child_process';
import { sql } from 'kysely';
import { startTestApp, type TestApp } from '../support/test-app';
import { itWithTool, PROMTOOL } from '../support/tools';
import { publishDag } from './runs-support';

const itWithPromtool = itWithTool(PROMTOOL, 'the Prometheus exposition lint (promtool check metrics)');

/** The samples of one metric: labels (as text) → value. */
function samples(text: string, name: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const line of text.split('\n')) {
    const m = new RegExp(`^${name}\\{([^}]*)\\} (\\S+)$`).exec(line);
    if (m) out.set(m[1], Number(m[2]));
  }
  return out;
}

/**
 * The per-tenant queue and limit metrics keep their label sets bounded: with
 * ORDO_METRICS_TOP_TENANTS = 2 and three busy tenants, two are named and the third is `other`.
 */
describe('/metrics: per-tenant queue and limit metrics, top N tenants plus other', () => {
  let app: TestApp;
  const T = ['top-one', 'top-two', 'top-three'];

  const scrape = async () => {
    const r = await app.request('GET', '/metrics', { as: { token: app.platformToken } });
    expect(r.status).toBe(200);
    return r.text;
  };
  const hit = (tenant: string, hits: number) =>
    sql`insert into limit_hit (tenant_id, limit_name, minute, hits)
        values (${tenant}, 'runsPerMinute', date_trunc('minute', now()), ${hits})
        on conflict (tenant_id, limit_name, minute) do update set hits = limit_hit.hits + excluded.hits`.execute(
      app.ordo.database.system,
    );

  beforeAll(async () => {
    app = await startTestApp({ ORDO_ROLES: 'api', ORDO_METRICS_TOP_TENANTS: '2' });
    // Ready steps through the API: 5, 3 and 1 (no worker runs here, so they stay ready).
    for (const [i, tenant] of T.entries()) {
      const as = await app.tenant(tenant);
      const width = [5, 3, 1][i];
      await publishDag(app, tenant, {
        id: 'wide',
        steps: Array.from({ length: width }, (_, k) => ({ id: `s${k}`, plugin: 'noop' })),
      });
      const r = await app.request('POST', '/api/v1/runs', { as, body: { dagId: 'wide', inputs: {}, runToken: 'w1' } });
      expect(r.status).toBe(201);
    }
  });
  afterAll(async () => app?.close());

  it('names the deepest queues and sums the rest as other, with the oldest ready age of each', async () => {
    const text = await scrape();
    const depth = samples(text, 'orchestrator_queue_depth');
    expect(Object.fromEntries(depth)).toEqual({
      'tenant="top-one"': 5,
      'tenant="top-two"': 3,
      'tenant="other"': 1,
    });
    const oldest = samples(text, 'orchestrator_oldest_ready_seconds');
    expect([...oldest.keys()].sort()).toEqual(['tenant="other"', 'tenant="top-one"', 'tenant="top-two"']);
    // other holds the third tenant's age: it was queued last, so it is the youngest.
    expect(oldest.get('tenant="other"')).toBeGreaterThanOrEqual(0);
    expect(oldest.get('tenant="top-one"')).toBeGreaterThanOrEqual(oldest.get('tenant="other"') ?? Infinity);
    expect(text).toContain('# TYPE orchestrator_oldest_ready_seconds gauge');
  });

  it('counts limit hits from limit_hit, naming the top tenants by hits, every series only growing', async () => {
    await hit('top-one', 1);
    await hit('top-two', 5);
    await hit('top-three', 4);
    let hits = samples(await scrape(), 'orchestrator_limit_hits_total');
    expect(Object.fromEntries(hits)).toEqual({
      'tenant="top-two",limit="runsPerMinute"': 5,
      'tenant="top-three",limit="runsPerMinute"': 4,
      'tenant="other",limit="runsPerMinute"': 1,
    });
    // A reading without new hits adds nothing.
    expect(Object.fromEntries(samples(await scrape(), 'orchestrator_limit_hits_total'))).toEqual(
      Object.fromEntries(hits),
    );
    // top-one overtakes top-three: it is named from now on (its earlier hit stays in other) and
    // top-three's series ends; still three series.
    await hit('top-one', 9);
    hits = samples(await scrape(), 'orchestrator_limit_hits_total');
    expect(Object.fromEntries(hits)).toEqual({
      'tenant="top-one",limit="runsPerMinute"': 9,
      'tenant="top-two",limit="runsPerMinute"': 5,
      'tenant="other",limit="runsPerMinute"': 1,
    });
    // An unnamed tenant's hits go to other.
    await hit('top-two', 2);
    await hit('top-three', 1);
    hits = samples(await scrape(), 'orchestrator_limit_hits_total');
    expect(Object.fromEntries(hits)).toEqual({
      'tenant="top-one",limit="runsPerMinute"': 9,
      'tenant="top-two",limit="runsPerMinute"': 7,
      'tenant="other",limit="runsPerMinute"': 2,
    });
  });

  itWithPromtool('passes promtool check metrics', async () => {
    const text = await scrape();
    expect(text).toContain('orchestrator_limit_hits_total{');
    const check = spawnSync('promtool', ['check', 'metrics'], { input: text, encoding: 'utf8', timeout: 20_000 });
    expect({ status: check.status, out: check.stdout + check.stderr }).toEqual({ status: 0, out: '' });
  });

  it('refuses no token (401) and tenant tokens (403)', async () => {
    expect((await app.request('GET', '/metrics')).status).toBe(401);
    expect(
      (await app.request('GET', '/metrics', { as: { token: app.adminToken, tenantId: app.tenantId } })).status,
    ).toBe(403);
  });
});
