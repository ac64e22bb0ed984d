import type { Browser, BrowserContext, Page } from 'playwright-core';
import { generateSigningKeyPair } from '../../src/modules/trust/detached-jws';
import { startTestApp, type TestApp } from '../support/test-app';
import { launchChromium, screenshot, seriousViolations } from './browser';

// The console's DAG diff and version status, schedules, bundles and trust keys, tokens, usage and
// the operator's tenants and queues, in headless Chromium against a real Ordo (api, worker and
// scheduler roles on a real PostgreSQL). Data is made through the API; every action the page takes
// is checked through the API afterwards.

const REPORT_V1 = {
  id: 'report',
  steps: [
    { id: 'extract', plugin: 'noop', with: { output: { rows: 3 } } },
    { id: 'publish', plugin: 'noop', dependsOn: ['extract'] },
  ],
};
const REPORT_V2 = {
  id: 'report',
  steps: [
    { id: 'extract', plugin: 'noop', with: { output: { rows: 5 } } },
    { id: 'publish', plugin: 'noop', dependsOn: ['extract'] },
  ],
};
const BEAT = { id: 'beat', steps: [{ id: 'tick', plugin: 'noop' }] };

type Who = { token: string; tenantId: string };
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

// Each test drives several pages and runs axe-core on each: slower than the project's default on a busy machine.
jest.setTimeout(120_000);

describe('web console: DAG diff, schedules, bundles, trust keys, tokens, usage, tenants', () => {
  let app: TestApp;
  let browser: Browser;
  let context: BrowserContext;
  let page: Page;
  let as: Who;
  let other: Who;
  let beatScheduleId: string;
  let dailyScheduleId: string;
  let otherScheduleId: string;
  let otherTokenJti: string;

  const ok = async (method: 'POST' | 'PUT' | 'GET', path: string, who: Who | { token: string }, body?: object) => {
    const r = await app.request(method, path, { as: who, body });
    if (r.status >= 300) throw new Error(`${method} ${path}: ${String(r.status)} ${JSON.stringify(r.body)}`);
    return r.body;
  };
  const expectAccessible = async (p: Page = page) => expect(await seriousViolations(p)).toEqual([]);
  const signIn = async (ctx: BrowserContext, token: string, landing: string): Promise<Page> => {
    const p = await ctx.newPage();
    await p.goto(`${app.url}/sign-in`);
    await p.getByLabel('API token').fill(token);
    await p.getByRole('button', { name: 'Sign in' }).click();
    await p.getByRole('heading', { name: landing, exact: true }).waitFor();
    return p;
  };

  beforeAll(async () => {
    app = await startTestApp({ ORDO_ROLES: 'api,worker,scheduler' });
    as = { token: app.adminToken, tenantId: app.tenantId };
    other = await app.tenant('pages-other');
    const platform = { token: app.platformToken };

    await ok('POST', '/api/v1/dags', as, REPORT_V1);
    await ok('POST', '/api/v1/dags', as, REPORT_V2);
    await ok('POST', '/api/v1/dags', as, BEAT);
    await ok('POST', '/api/v1/dags', other, { id: 'secret-dag', steps: [{ id: 'only', plugin: 'noop' }] });

    beatScheduleId = (
      await ok('POST', '/api/v1/schedules', as, { dagId: 'beat', cron: '* * * * * *', timezone: 'UTC' })
    ).id;
    dailyScheduleId = (
      await ok('POST', '/api/v1/schedules', as, {
        dagId: 'report',
        version: 2,
        cron: '0 9 * * *',
        timezone: 'Europe/Berlin',
        paused: true,
      })
    ).id;
    otherScheduleId = (
      await ok('POST', '/api/v1/schedules', other, { dagId: 'secret-dag', cron: '0 3 * * *', timezone: 'UTC' })
    ).id;
    otherTokenJti = (
      await ok('POST', '/api/v1/tokens', other, { subject: 'other-secret-bot', scopes: ['orchestrator:read'] })
    ).jti;

    const key = await generateSigningKeyPair('pages-key-2026');
    await ok('POST', '/api/v1/trust/keys', as, { kid: key.publicJwk.kid, owner: 'acme', publicJwk: key.publicJwk });
    const otherKey = await generateSigningKeyPair('other-secret-key');
    await ok('POST', '/api/v1/trust/keys', other, {
      kid: otherKey.publicJwk.kid,
      owner: 'them',
      publicJwk: otherKey.publicJwk,
    });

    await ok('POST', '/api/v1/plans', platform, {
      id: 'team',
      description: 'Team',
      limits: { monthlyRuns: 5000, maxConcurrentRuns: 40, runsPerMinute: 600 },
    });
    await ok('PUT', `/api/v1/tenants/${as.tenantId}/plan`, platform, { planId: 'team', timeZone: 'Europe/Berlin' });

    browser = await launchChromium();
    context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
    page = await signIn(context, app.adminToken, 'Runs');
  }, 240_000);

  afterAll(async () => {
    await browser?.close();
    await app?.close();
  });

  it('shows a changed line between two versions of a DAG', async () => {
    await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'DAGs' }).click();
    await page.getByRole('link', { name: 'report' }).click();
    const compare = page.getByRole('form', { name: 'Compare versions' });
    expect(await compare.getByLabel('From').inputValue()).toBe('1');
    expect(await compare.getByLabel('To').inputValue()).toBe('2');
    await compare.getByRole('button', { name: 'Compare' }).click();
    await page.getByRole('heading', { name: 'report: v1 → v2' }).waitFor();
    // The heading comes before the two versions are read; the lines come with the summary.
    await page.getByTestId('diff-summary').waitFor();
    const diff = page.getByTestId('diff');
    expect(await diff.locator('[data-change="removed"]').allTextContents()).toEqual([
      expect.stringMatching(/^- +"rows": 3\n$/),
    ]);
    expect(await diff.locator('[data-change="added"]').allTextContents()).toEqual([
      expect.stringMatching(/^\+ +"rows": 5\n$/),
    ]);
    expect(await page.getByTestId('diff-summary').textContent()).toBe('1 lines added, 1 removed');
    await expectAccessible();
    await screenshot(page, 'dag-diff');

    // The same version against itself: no change.
    await page.goto(`${app.url}/dags/report/diff?from=2&to=2`);
    await page.getByTestId('diff-summary').filter({ hasText: 'none' }).waitFor();
    expect(await page.locator('[data-change="added"], [data-change="removed"]').count()).toBe(0);
  });

  it('disables a version, after which starting a run of it is refused, and enables it again', async () => {
    await page.goto(`${app.url}/dags/report/versions/1`);
    await page.getByRole('button', { name: 'Disable version' }).click();
    await page.getByRole('button', { name: 'Enable version' }).waitFor();
    await page.getByText('This version is disabled').waitFor();
    await expectAccessible();
    expect((await ok('GET', '/api/v1/dags/report/versions/1', as)).status).toBe('disabled');
    const refused = await app.request('POST', '/api/v1/runs', {
      as,
      body: { dagId: 'report', version: 1, inputs: {}, runToken: 'report-v1-after-disable' },
    });
    expect(refused.status).toBe(409);
    expect(refused.body.error.code).toBe('DAG_VERSION_DISABLED');

    await page.getByRole('button', { name: 'Enable version' }).click();
    await page.getByRole('button', { name: 'Disable version' }).waitFor();
    expect((await ok('GET', '/api/v1/dags/report/versions/1', as)).status).toBe('active');
  });

  it("lists schedules, shows next fire times in the schedule's zone, its fire history, and pauses it", async () => {
    // The every-second schedule has fired at least twice before the page is read.
    const deadline = Date.now() + 20_000;
    while ((await ok('GET', `/api/v1/schedules/${beatScheduleId}/fires`, as)).items.length < 2) {
      if (Date.now() > deadline) throw new Error('the every-second schedule did not fire');
      await sleep(200);
    }
    await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Schedules' }).click();
    await page.locator(`tr[data-schedule-id="${beatScheduleId}"]`).waitFor();
    const daily = page.locator(`tr[data-schedule-id="${dailyScheduleId}"]`);
    expect(await daily.textContent()).toContain('Europe/Berlin');
    expect(await daily.textContent()).toContain('paused');
    expect(await page.locator(`tr[data-schedule-id="${otherScheduleId}"]`).count()).toBe(0);
    await expectAccessible();
    await screenshot(page, 'schedules');

    // Next fire times: 09:00 on the wall clock in Berlin, whatever the browser's zone.
    await daily.getByRole('link', { name: dailyScheduleId.slice(0, 8) }).click();
    const next = page.getByTestId('next-fires');
    await next.locator('tbody tr').first().waitFor();
    const locals = await next.locator('tbody tr td:first-child').allTextContents();
    expect(locals).toHaveLength(10);
    for (const l of locals) expect(l).toMatch(/^\d{4}-\d{2}-\d{2} 09:00:00 \+0[12]:00$/);
    const api = await ok('GET', `/api/v1/schedules/${dailyScheduleId}/next?count=10`, as);
    expect(await next.locator('tbody tr td:nth-child(2)').first().textContent()).toBe(
      (api.items[0].utc as string).replace('T', ' ').replace(/\.000Z$|Z$/, ' UTC'),
    );
    await expectAccessible();
    await screenshot(page, 'schedule');

    // The firing schedule: its history, then paused from the page.
    await page.goto(`${app.url}/schedules/${beatScheduleId}`);
    const history = page.getByTestId('fire-history');
    await history.locator('tbody tr').nth(1).waitFor();
    expect(await history.locator('tbody tr').first().textContent()).toContain('created');
    await expectAccessible();
    await page.getByRole('button', { name: 'Pause schedule' }).click();
    await page.getByTestId('schedule-state').filter({ hasText: 'paused' }).waitFor();
    await page.getByRole('button', { name: 'Resume schedule' }).waitFor();
    expect((await ok('GET', `/api/v1/schedules/${beatScheduleId}`, as)).paused).toBe(true);
  });

  it('mints a token whose secret is shown once and works, then revokes it', async () => {
    await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Tokens' }).click();
    await page.getByRole('heading', { name: 'Mint a token' }).waitFor();
    expect(await page.locator(`tr[data-jti="${otherTokenJti}"]`).count()).toBe(0);
    expect(await page.content()).not.toContain('other-secret-bot');
    await page.getByLabel('read: look at runs, DAGs, schedules').check();
    await page.getByLabel('Subject').fill('ci-bot');
    await page.getByLabel('Description').fill('nightly export');
    await page.getByRole('button', { name: 'Mint token' }).click();
    const secret = await page.getByTestId('minted-token').inputValue();
    expect(secret.split('.')).toHaveLength(3);
    await expectAccessible();
    // The page shows it once; it is a working read token of this tenant.
    expect((await app.request('GET', '/api/v1/runs', { as: { token: secret, tenantId: as.tenantId } })).status).toBe(
      200,
    );
    await page.getByRole('button', { name: 'Done' }).click();
    await page.getByRole('heading', { name: 'Mint a token' }).waitFor();
    expect(await page.content()).not.toContain(secret);
    expect(await page.evaluate('JSON.stringify(localStorage) + JSON.stringify(sessionStorage)')).not.toContain(secret);

    const row = page.locator('tr', { hasText: 'ci-bot' });
    await row.waitFor();
    expect(await row.textContent()).toContain('active');
    await screenshot(page, 'tokens');
    await row.getByRole('button', { name: 'Revoke' }).click();
    await row.getByRole('button', { name: 'Yes, revoke' }).click();
    await row.filter({ hasText: 'revoked' }).waitFor();
    expect((await app.request('GET', '/api/v1/runs', { as: { token: secret, tenantId: as.tenantId } })).status).toBe(
      401,
    );
    await expectAccessible();
  });

  it("shows the tenant's usage against its plan's limits, the period and its reset", async () => {
    await ok('POST', '/api/v1/runs', as, { dagId: 'report', inputs: {}, runToken: 'usage-run' });
    await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Usage' }).click();
    const facts = page.getByTestId('usage-facts');
    await facts.waitFor();
    const usage = await ok('GET', '/api/v1/usage', as);
    expect(usage.plan).toBe('team');
    expect(await facts.textContent()).toContain('team');
    expect(await page.getByTestId('usage-resets').textContent()).toContain('(Europe/Berlin)');
    const runs = page.locator('tr[data-usage="runsThisPeriod"]');
    expect(await runs.locator('td').nth(1).textContent()).toBe('5,000');
    expect(await runs.locator('td').first().textContent()).toBe(usage.usage.runsThisPeriod.toLocaleString('en'));
    expect(usage.usage.runsThisPeriod).toBeGreaterThan(0);
    expect(await page.locator('tr[data-usage="concurrentRuns"] td').nth(1).textContent()).toBe('40');
    await expectAccessible();
    await screenshot(page, 'usage');
  });

  it('lists trust keys and revokes one; lists bundles', async () => {
    await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Trust keys' }).click();
    const row = page.locator('tr[data-kid="pages-key-2026"]');
    await row.waitFor();
    expect(await page.locator('tr[data-kid="other-secret-key"]').count()).toBe(0);
    expect(await page.getByTestId('policy').textContent()).toContain('unsigned DAG versions are accepted');
    await expectAccessible();
    await row.getByRole('button', { name: 'Revoke' }).click();
    await row.getByRole('button', { name: 'Yes, revoke' }).click();
    await row.filter({ hasText: 'revoked' }).waitFor();
    expect((await ok('GET', '/api/v1/trust/keys/pages-key-2026', as)).revokedAt).not.toBeNull();

    await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Bundles' }).click();
    await page.getByText('No bundles imported yet.').waitFor();
    await expectAccessible();
  });

  it("never shows another tenant's schedule, even by its address", async () => {
    await page.goto(`${app.url}/schedules/${otherScheduleId}`);
    await page.getByRole('heading', { name: 'Schedule not found' }).waitFor();
    expect(await page.content()).not.toContain('secret-dag');
    await expectAccessible();
    await page.goto(`${app.url}/dags/secret-dag/diff?from=1&to=1`);
    await page.getByRole('alert').waitFor();
    expect(await page.locator('[data-testid="diff"]').count()).toBe(0);
    // Operator pages are not a tenant's.
    await page.goto(`${app.url}/tenants`);
    await page.getByRole('heading', { name: 'Not found' }).waitFor();
    expect(await page.content()).not.toContain('pages-other');
  });

  it('a read-only session sees no actions', async () => {
    const reader = await app.token(as.tenantId, ['orchestrator:read']);
    const ctx = await browser.newContext({ viewport: { width: 1280, height: 800 } });
    try {
      const p = await signIn(ctx, reader, 'Runs');
      const nav = p.getByRole('navigation', { name: 'Main' });
      expect(await nav.getByRole('link', { name: 'Tokens' }).count()).toBe(0);
      await p.goto(`${app.url}/schedules/${dailyScheduleId}`);
      await p.getByTestId('next-fires').waitFor();
      expect(await p.getByRole('button', { name: /schedule/ }).count()).toBe(0);
      await p.goto(`${app.url}/dags/report/versions/2`);
      await p.getByText('Content hash').waitFor();
      expect(await p.getByRole('button', { name: /version/ }).count()).toBe(0);
    } finally {
      await ctx.close();
    }
  });

  it('the platform operator sees tenants, their plans and usage, disables and enables one, and sees the queues', async () => {
    const ctx = await browser.newContext({ viewport: { width: 1280, height: 800 } });
    try {
      const p = await signIn(ctx, app.platformToken, 'Tenants');
      const nav = p.getByRole('navigation', { name: 'Main' });
      expect(await nav.getByRole('link').allTextContents()).toEqual(['Tenants', 'Queues']);
      const mine = p.locator(`tr[data-tenant-id="${as.tenantId}"]`);
      const theirs = p.locator(`tr[data-tenant-id="${other.tenantId}"]`);
      await theirs.waitFor();
      expect(await mine.textContent()).toContain('team');
      await expectAccessible(p);
      await screenshot(p, 'tenants');

      await theirs.getByRole('button', { name: `Disable ${other.tenantId}` }).click();
      await theirs.getByRole('button', { name: 'Yes, disable' }).click();
      await theirs.getByRole('button', { name: `Enable ${other.tenantId}` }).waitFor();
      expect(theirs.getByText('disabled')).toBeTruthy();
      expect((await app.request('GET', '/api/v1/runs', { as: other })).status).toBe(403);
      await theirs.getByRole('button', { name: `Enable ${other.tenantId}` }).click();
      await theirs.getByRole('button', { name: `Disable ${other.tenantId}` }).waitFor();
      expect((await app.request('GET', '/api/v1/runs', { as: other })).status).toBe(200);

      await mine.getByRole('link').click();
      await p.getByTestId('usage-facts').waitFor();
      expect(await p.getByRole('form', { name: 'Assign a plan' }).getByRole('combobox').inputValue()).toBe('team');
      expect(await p.locator('tr[data-usage="runsThisPeriod"] td').nth(1).textContent()).toBe('5,000');
      await expectAccessible(p);

      await nav.getByRole('link', { name: 'Queues' }).click();
      const queues = p.getByTestId('queues');
      await queues.getByRole('link', { name: as.tenantId }).waitFor();
      await queues.getByRole('link', { name: other.tenantId }).waitFor();
      await expectAccessible(p);

      // A tenant's page is not the operator's.
      await p.goto(`${app.url}/runs/00000000-0000-4000-8000-000000000000`);
      await p.getByRole('heading', { name: 'Not found' }).waitFor();
    } finally {
      await ctx.close();
    }
  });

  it('is readable on a narrow window: the nav wraps, wide tables scroll inside the page', async () => {
    const ctx = await browser.newContext({ viewport: { width: 390, height: 844 }, isMobile: true, hasTouch: true });
    try {
      const p = await signIn(ctx, app.adminToken, 'Runs');
      for (const [path, heading] of [
        ['/runs', 'Runs'],
        ['/dags', 'DAGs'],
        ['/dags/report/diff?from=1&to=2', 'report: v1 → v2'],
        ['/schedules', 'Schedules'],
        [`/schedules/${beatScheduleId}`, `Schedule ${beatScheduleId.slice(0, 8)}`],
        ['/tokens', 'Tokens'],
        ['/usage', 'Usage'],
        ['/trust', 'Trust keys'],
      ] as const) {
        await p.goto(`${app.url}${path}`);
        await p.getByRole('heading', { name: heading, exact: true }).waitFor();
        await p.waitForLoadState('networkidle');
        // Nothing widens the page: what is wide scrolls in its own frame.
        const widths = await p.evaluate<{ page: number; view: number }>(
          '({ page: document.documentElement.scrollWidth, view: innerWidth })',
        );
        expect({ path, ...widths }).toEqual({ path, page: widths.view, view: widths.view });
        // Every nav link is on screen.
        for (const box of await p
          .getByRole('navigation', { name: 'Main' })
          .getByRole('link')
          .evaluateAll((as) => as.map((a) => a.getBoundingClientRect().right)))
          expect(box).toBeLessThanOrEqual(widths.view);
        await expectAccessible(p);
        if (path === '/schedules') await screenshot(p, 'narrow-schedules');
      }
    } finally {
      await ctx.close();
    }
  }, 240_000);
});
