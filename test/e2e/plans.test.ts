import pg from 'pg';
import { AUDIT_GENESIS_HASH, operatorAuditHash } from '../../src/modules/plans/operator-audit.repository';
import { startTestApp, type TestApp } from '../support/test-app';

/** Plans, assignments, overrides and usage through the platform and tenant routes. */
describe('plans API', () => {
  let app: TestApp;
  let owner: pg.Client;
  const op = () => ({ token: app.platformToken });
  const A = 'plan-alpha';
  const B = 'plan-beta';
  let asA: { token: string; tenantId: string };
  let asB: { token: string; tenantId: string };

  const count = async (q: string, params: unknown[] = []) =>
    Number((await owner.query<{ n: string }>(q, params)).rows[0].n);
  const auditRows = () => count('select count(*) as n from operator_audit');
  const queueRow = async (tenant: string) =>
    (
      await owner.query<{ weight: number; max_in_flight: number | null }>(
        'select weight, max_in_flight from tenant_queue where tenant_id = $1',
        [tenant],
      )
    ).rows[0];
  const post = (url: string, body: unknown) => app.request('POST', url, { as: op(), body });
  const put = (url: string, body: unknown) => app.request('PUT', url, { as: op(), body });
  const get = (url: string) => app.request('GET', url, { as: op() });

  beforeAll(async () => {
    app = await startTestApp();
    asA = await app.tenant(A);
    asB = await app.tenant(B);
    owner = new pg.Client({ connectionString: app.testDb.ownerUrl });
    await owner.connect();
  });
  afterAll(async () => {
    await owner?.end();
    await app?.close();
  });

  it('creates, lists, reads, updates and deletes a plan, each change audited', async () => {
    const before = await auditRows();
    const c = await post('/api/v1/plans', {
      id: 'starter',
      description: 'Starter',
      limits: { monthlyRuns: 1000, weight: 2, maxStepsInFlight: 4 },
    });
    expect(c.status).toBe(201);
    expect(c.body).toMatchObject({
      id: 'starter',
      description: 'Starter',
      limits: { monthlyRuns: 1000, weight: 2, maxStepsInFlight: 4 },
      tenants: 0,
    });
    const dup = await post('/api/v1/plans', { id: 'starter', limits: {} });
    expect({ status: dup.status, code: dup.body.error.code }).toEqual({ status: 409, code: 'PLAN_EXISTS' });

    const list = await get('/api/v1/plans');
    expect(list.status).toBe(200);
    expect((list.body.items as { id: string }[]).map((p) => p.id)).toContain('starter');
    expect((await get('/api/v1/plans/starter')).body.limits).toEqual({
      monthlyRuns: 1000,
      weight: 2,
      maxStepsInFlight: 4,
    });

    const u = await put('/api/v1/plans/starter', { limits: { monthlyRuns: 5 }, reason: 'downgrade' });
    expect(u.status).toBe(200);
    // The limits are replaced as a whole; the description stays when not given.
    expect(u.body).toMatchObject({ description: 'Starter', limits: { monthlyRuns: 5 } });

    const tmp = await post('/api/v1/plans', { id: 'tmp', limits: {} });
    expect(tmp.status).toBe(201);
    expect((await app.request('DELETE', '/api/v1/plans/tmp', { as: op() })).status).toBe(204);
    expect((await get('/api/v1/plans/tmp')).status).toBe(404);

    const rows = await owner.query<{ action: string; plan_id: string; reason: string | null; detail: any }>(
      'select action, plan_id, reason, detail from operator_audit where seq > $1 order by seq',
      [before],
    );
    expect(rows.rows.map((r) => [r.action, r.plan_id])).toEqual([
      ['plan.create', 'starter'],
      ['plan.update', 'starter'],
      ['plan.create', 'tmp'],
      ['plan.delete', 'tmp'],
    ]);
    expect(rows.rows[1].reason).toBe('downgrade');
    expect(rows.rows[1].detail.before.limits).toEqual({ monthlyRuns: 1000, weight: 2, maxStepsInFlight: 4 });
    expect(rows.rows[1].detail.after.limits).toEqual({ monthlyRuns: 5 });
  });

  it('assigns a plan to a tenant, copies its engine share into the tenant queue, and a plan update reaches it', async () => {
    await post('/api/v1/plans', { id: 'team', limits: { weight: 3, maxStepsInFlight: 8, monthlyRuns: 100 } });
    const r = await put(`/api/v1/tenants/${A}/plan`, { planId: 'team', timeZone: 'Europe/Paris', reason: 'signed up' });
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({
      tenantId: A,
      planId: 'team',
      timeZone: 'Europe/Paris',
      overrides: {},
      limits: { weight: 3, maxStepsInFlight: 8, monthlyRuns: 100 },
    });
    expect(await queueRow(A)).toEqual({ weight: 3, max_in_flight: 8 });

    const u = await put('/api/v1/plans/team', { limits: { weight: 5, monthlyRuns: 100 }, reason: 'rebalance' });
    expect(u.status).toBe(200);
    expect(u.body.tenants).toBe(1);
    expect(await queueRow(A)).toEqual({ weight: 5, max_in_flight: null });

    const audit = await owner.query<{ actor: string; token_jti: string; tenant_id: string; detail: any }>(
      "select actor, token_jti, tenant_id, detail from operator_audit where action = 'tenant.plan.assign' order by seq desc limit 1",
    );
    expect(audit.rows[0].tenant_id).toBe(A);
    expect(audit.rows[0].actor).toEqual(expect.any(String));
    expect(audit.rows[0].token_jti).toEqual(expect.any(String));
    expect(audit.rows[0].detail).toEqual({
      before: null,
      after: { planId: 'team', timeZone: 'Europe/Paris', overrides: {} },
    });
  });

  it('sets overrides (a reason required; null lifts a limit) and shows the effective limits in usage', async () => {
    const noReason = await put(`/api/v1/tenants/${A}/limits`, { overrides: { monthlyRuns: 7 } });
    expect(noReason.status).toBe(400);
    const r = await put(`/api/v1/tenants/${A}/limits`, {
      overrides: { monthlyRuns: null, maxConcurrentRuns: 9, weight: 2 },
      reason: 'support ticket 42',
    });
    expect(r.status).toBe(200);
    expect(r.body.limits).toEqual({ weight: 2, maxConcurrentRuns: 9 });
    expect(await queueRow(A)).toEqual({ weight: 2, max_in_flight: null });

    const own = await app.request('GET', '/api/v1/usage', { as: asA });
    expect(own.status).toBe(200);
    expect(own.body).toMatchObject({
      plan: 'team',
      limits: { weight: 2, maxConcurrentRuns: 9 },
      usage: { runsThisPeriod: 0, concurrentRuns: 0, queuedSteps: 0, stepsInFlight: 0, artifactBytes: 0 },
      period: { timeZone: 'Europe/Paris' },
    });
    // The period is the calendar month in Paris: it starts and resets at a Paris midnight.
    const start = new Date(own.body.period.start as string);
    const resets = new Date(own.body.period.resetsAt as string);
    const paris = (d: Date) =>
      new Intl.DateTimeFormat('en-GB', {
        timeZone: 'Europe/Paris',
        day: '2-digit',
        hour: '2-digit',
        minute: '2-digit',
        hourCycle: 'h23',
      }).format(d);
    expect(paris(start)).toBe('01, 00:00');
    expect(paris(resets)).toBe('01, 00:00');
    expect(start.getTime()).toBeLessThanOrEqual(Date.now());
    expect(resets.getTime()).toBeGreaterThan(Date.now());

    const platform = await get(`/api/v1/tenants/${A}/usage`);
    expect(platform.status).toBe(200);
    expect(platform.body).toEqual(own.body);
  });

  it('resets the period count with a reason, audited with the count before', async () => {
    await put(`/api/v1/tenants/${A}/limits`, { overrides: {}, reason: 'back to plan' });
    await owner.query(`update tenant_usage set runs_created = 17 where tenant_id = $1`, [A]);
    expect((await app.request('GET', '/api/v1/usage', { as: asA })).body.usage.runsThisPeriod).toBe(17);
    expect((await post(`/api/v1/tenants/${A}/usage/reset`, {})).status).toBe(400);
    const r = await post(`/api/v1/tenants/${A}/usage/reset`, { reason: 'billing dispute' });
    expect(r.status).toBe(200);
    expect(r.body.usage.runsThisPeriod).toBe(0);
    const audit = await owner.query<{ reason: string; detail: any }>(
      "select reason, detail from operator_audit where action = 'tenant.usage.reset' order by seq desc limit 1",
    );
    expect(audit.rows[0].reason).toBe('billing dispute');
    expect(audit.rows[0].detail).toMatchObject({ before: { runsThisPeriod: 17 }, after: { runsThisPeriod: 0 } });
  });

  it('refuses to delete a plan a tenant is on (409) and changes nothing', async () => {
    const before = await auditRows();
    const r = await app.request('DELETE', '/api/v1/plans/team', { as: op() });
    expect({ status: r.status, code: r.body.error.code }).toEqual({ status: 409, code: 'PLAN_IN_USE' });
    expect((await get('/api/v1/plans/team')).status).toBe(200);
    expect(await auditRows()).toBe(before);
  });

  it('answers 404 for unknown tenants and plans and 400 for bad input, writing nothing', async () => {
    const before = await auditRows();
    const plansBefore = await count('select count(*) as n from plan');
    const cases: [string, string, unknown, number, string][] = [
      ['PUT', '/api/v1/tenants/nope/plan', { planId: 'team' }, 404, 'NOT_FOUND'],
      ['PUT', `/api/v1/tenants/${B}/plan`, { planId: 'nope' }, 404, 'PLAN_NOT_FOUND'],
      ['PUT', `/api/v1/tenants/${B}/plan`, { planId: 'team', timeZone: 'Mars/Olympus' }, 400, 'VALIDATION_FAILED'],
      ['PUT', `/api/v1/tenants/${B}/plan`, { planId: 'team', timeZone: '+02:00' }, 400, 'VALIDATION_FAILED'],
      ['PUT', '/api/v1/tenants/nope/limits', { overrides: {}, reason: 'x' }, 404, 'NOT_FOUND'],
      ['PUT', `/api/v1/tenants/${B}/limits`, { overrides: {}, reason: 'x' }, 409, 'TENANT_HAS_NO_PLAN'],
      ['GET', '/api/v1/tenants/nope/usage', undefined, 404, 'NOT_FOUND'],
      ['POST', '/api/v1/tenants/nope/usage/reset', { reason: 'x' }, 404, 'NOT_FOUND'],
      ['GET', '/api/v1/plans/nope', undefined, 404, 'PLAN_NOT_FOUND'],
      ['PUT', '/api/v1/plans/nope', { limits: {} }, 404, 'PLAN_NOT_FOUND'],
      ['DELETE', '/api/v1/plans/nope', undefined, 404, 'PLAN_NOT_FOUND'],
      ['POST', '/api/v1/plans', { id: 'Bad Id', limits: {} }, 400, 'VALIDATION_FAILED'],
      ['POST', '/api/v1/plans', { id: 'neg', limits: { monthlyRuns: -1 } }, 400, 'VALIDATION_FAILED'],
      ['POST', '/api/v1/plans', { id: 'absurd', limits: { weight: 1e9 } }, 400, 'VALIDATION_FAILED'],
      ['POST', '/api/v1/plans', { id: 'frac', limits: { maxConcurrentRuns: 1.5 } }, 400, 'VALIDATION_FAILED'],
      ['POST', '/api/v1/plans', { id: 'keep-neg', limits: { retentionDays: -1 } }, 400, 'VALIDATION_FAILED'],
      ['POST', '/api/v1/plans', { id: 'keep-long', limits: { retentionDays: 100_000 } }, 400, 'VALIDATION_FAILED'],
      ['POST', '/api/v1/plans', { id: 'unknown', limits: { cpus: 4 } }, 400, 'VALIDATION_FAILED'],
      ['POST', '/api/v1/plans', { id: 'nolimits' }, 400, 'VALIDATION_FAILED'],
      ['PUT', '/api/v1/plans/team', { limits: { weight: 0 } }, 400, 'VALIDATION_FAILED'],
      [
        'PUT',
        `/api/v1/tenants/${A}/limits`,
        { overrides: { monthlyRuns: 'many' }, reason: 'x' },
        400,
        'VALIDATION_FAILED',
      ],
      ['PUT', `/api/v1/tenants/${A}/limits`, { overrides: {}, reason: '   ' }, 400, 'VALIDATION_FAILED'],
    ];
    for (const [method, url, body, status, code] of cases) {
      const r = await app.request(method, url, { as: op(), body });
      expect({ method, url, status: r.status, code: r.body?.error?.code }).toEqual({ method, url, status, code });
    }
    expect(await auditRows()).toBe(before);
    expect(await count('select count(*) as n from plan')).toBe(plansBefore);
    expect(await count('select count(*) as n from tenant_plan where tenant_id = $1', [B])).toBe(0);
    expect((await get('/api/v1/plans/team')).body.limits).toEqual({ weight: 5, monthlyRuns: 100 });
  });

  it("refuses plan changes and other tenants' usage to tenant tokens", async () => {
    const admin = asA;
    for (const [method, url, body] of [
      ['POST', '/api/v1/plans', { id: 'mine', limits: {} }],
      ['PUT', '/api/v1/plans/team', { limits: {} }],
      ['PUT', `/api/v1/tenants/${A}/plan`, { planId: 'team' }],
      ['PUT', `/api/v1/tenants/${A}/limits`, { overrides: {}, reason: 'x' }],
      ['POST', `/api/v1/tenants/${A}/usage/reset`, { reason: 'x' }],
      ['GET', `/api/v1/tenants/${B}/usage`, undefined],
    ] as const) {
      const r = await app.request(method, url, { as: admin, body });
      expect({ url, status: r.status }).toEqual({ url, status: 403 });
    }
    expect(await count('select count(*) as n from plan where id = $1', ['mine'])).toBe(0);
  });

  it("shows a tenant only its own usage: B's GET /usage under B's token carries nothing of A's plan", async () => {
    const b = await app.request('GET', '/api/v1/usage', { as: asB });
    expect(b.status).toBe(200);
    expect(b.body.plan).toBeNull();
    expect(b.body.limits).toEqual({});
    expect(b.text).not.toContain('team');
    // B's token naming A is refused.
    const cross = await app.request('GET', '/api/v1/usage', { as: { token: asB.token, tenantId: A } });
    expect(cross.status).toBe(403);
  });

  it('chains the operator audit log: each entry hashes the previous one', async () => {
    const { rows } = await owner.query<{
      seq: string;
      at: Date;
      actor: string;
      token_jti: string;
      action: string;
      tenant_id: string | null;
      plan_id: string | null;
      reason: string | null;
      detail: Record<string, unknown>;
      prev_hash: string;
      hash: string;
    }>('select * from operator_audit order by seq');
    expect(rows.length).toBeGreaterThan(5);
    let prev = AUDIT_GENESIS_HASH;
    for (const r of rows) {
      expect(r.prev_hash).toBe(prev);
      const hash = operatorAuditHash({
        seq: Number(r.seq),
        at: r.at.toISOString(),
        actor: r.actor,
        tokenJti: r.token_jti,
        action: r.action,
        tenantId: r.tenant_id,
        planId: r.plan_id,
        reason: r.reason,
        detail: r.detail,
        prevHash: r.prev_hash,
      });
      expect(r.hash).toBe(hash);
      prev = r.hash;
    }
  });
});
