import type { Browser, BrowserContext, Page, WebSocketRoute } from 'playwright-core';
import { startTestApp, type TestApp } from '../support/test-app';
import { launchChromium, screenshot, seriousViolations } from './browser';

// The web console in headless Chromium against a real Ordo (api, worker and scheduler roles on a
// real PostgreSQL): everything the page shows comes from the API and the stream, and every action
// it takes goes through them.

const PIPELINE = {
  id: 'pipeline',
  inputs: { type: 'object', properties: { fail: { type: 'boolean' } } },
  steps: [
    { id: 'extract', plugin: 'noop', with: { output: { rows: 3 } } },
    { id: 'review', plugin: 'approval', dependsOn: ['extract'], with: { message: 'load it?' } },
    { id: 'transform', plugin: 'noop', dependsOn: ['extract'], with: { output: { rows: 3 } } },
    {
      id: 'load',
      plugin: 'script',
      dependsOn: ['review', 'transform'],
      with: {
        code: 'console.log("loading", steps.transform.outputs.rows, "rows"); if (inputs.fail) throw new Error("the warehouse refused the rows"); return { loaded: steps.transform.outputs.rows };',
      },
    },
  ],
};

const SLOW = { id: 'slow', steps: [{ id: 'wait', plugin: 'noop', with: { sleepMs: 600_000 } }] };

describe('web console', () => {
  let app: TestApp;
  let browser: Browser;
  let context: BrowserContext;
  let page: Page;
  let as: { token: string; tenantId: string };
  let other: { token: string; tenantId: string };
  let otherRunId: string;

  const startRun = async (who: { token: string; tenantId: string }, dagId: string, inputs: object = {}) => {
    const r = await app.request('POST', '/api/v1/runs', {
      as: who,
      body: { dagId, inputs, runToken: `${dagId}-${String(Math.random()).slice(2)}` },
    });
    expect(r.status).toBe(201);
    return r.body.runId as string;
  };
  const decide = async (runId: string) => {
    // The approval step waits until the run has reached it; a 409 means not yet.
    for (;;) {
      const r = await app.request('POST', `/api/v1/runs/${runId}/steps/review/decision`, {
        as,
        body: { decision: 'approved' },
      });
      if (r.status === 200 || r.status === 201) return;
      expect(r.body.error.code).toBe('STEP_NOT_WAITING');
      await new Promise((res) => setTimeout(res, 50));
    }
  };
  const stepState = (stepId: string, state: string) => `.graph [data-step="${stepId}"][data-state="${state}"]`;
  const expectAccessible = async () => expect(await seriousViolations(page)).toEqual([]);

  beforeAll(async () => {
    app = await startTestApp({ ORDO_ROLES: 'api,worker,scheduler' });
    as = { token: app.adminToken, tenantId: app.tenantId };
    other = await app.tenant('console-other');
    for (const [who, dag] of [
      [as, PIPELINE],
      [as, SLOW],
      [other, { id: 'secret-dag', steps: [{ id: 'only', plugin: 'noop' }] }],
    ] as const) {
      const r = await app.request('POST', '/api/v1/dags', { as: who, body: dag });
      expect(r.status).toBe(201);
    }
    otherRunId = await startRun(other, 'secret-dag');
    browser = await launchChromium();
    context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
    page = await context.newPage();
  });

  afterAll(async () => {
    await browser?.close();
    await app?.close();
  });

  it('signs in with a pasted token; the cookie is HttpOnly and the page holds no token', async () => {
    await page.goto(`${app.url}/runs`);
    await page.getByLabel('API token').waitFor();
    await expectAccessible();
    await screenshot(page, 'sign-in');
    await page.getByLabel('API token').fill(app.adminToken);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByRole('heading', { name: 'Runs' }).waitFor();
    expect(page.url()).toBe(`${app.url}/runs`);
    const cookies = await context.cookies();
    expect(cookies.find((c) => c.name === 'ordo_session')).toMatchObject({ httpOnly: true, sameSite: 'Strict' });
    expect(await page.evaluate('document.cookie')).toBe('');
    expect(await page.content()).not.toContain(app.adminToken);
  });

  it('shows a run start live on the runs page, then its steps turning green on the run page', async () => {
    await page.getByTestId('live-state').filter({ hasText: 'Live' }).waitFor();
    const runId = await startRun(as, 'pipeline');
    const row = page.locator(`tr[data-run-id="${runId}"]`);
    await row.waitFor();
    await expectAccessible();
    await row.getByRole('link').click();
    await page.locator(stepState('review', 'waiting')).waitFor();
    await page.getByTestId('live-state').filter({ hasText: 'Live' }).waitFor();
    expect(await page.locator(stepState('load', 'pending')).count()).toBe(1);

    await decide(runId);
    for (const step of ['extract', 'review', 'transform', 'load'])
      await page.locator(stepState(step, 'succeeded')).waitFor();
    await page.getByTestId('run-status').filter({ hasText: 'succeeded' }).waitFor();
    await expectAccessible();
    await screenshot(page, 'run');
  });

  it("opens a failed step's logs and reruns the run from it", async () => {
    const runId = await startRun(as, 'pipeline', { fail: true });
    await decide(runId);
    await page.goto(`${app.url}/runs/${runId}`);
    await page.getByTestId('run-status').filter({ hasText: 'failed' }).waitFor();
    await page.locator(stepState('load', 'failed')).click();
    const detail = page.getByTestId('step-detail');
    await detail.getByTestId('step-logs').filter({ hasText: 'loading 3 rows' }).waitFor();
    expect(await detail.getByTestId('step-error').textContent()).toContain('the warehouse refused the rows');
    await expectAccessible();
    await detail.getByTestId('step-logs').scrollIntoViewIfNeeded();
    await screenshot(page, 'failed-step');

    await detail.getByRole('button', { name: 'Rerun from load' }).click();
    await page.waitForURL((url) => url.pathname.startsWith('/runs/') && !url.pathname.endsWith(runId));
    const rerunId = page.url().split('/').pop()!;
    await page.getByText('Rerun of').waitFor();
    await page.getByTestId('run-status').filter({ hasText: 'failed' }).waitFor();
    const rerun = await app.request('GET', `/api/v1/runs/${rerunId}`, { as });
    expect(rerun.body).toMatchObject({ rerunOf: runId, rerunFromStep: 'load' });
    const reused = Object.fromEntries(rerun.body.steps.map((s: any) => [s.stepId, s.fromRerun]));
    expect(reused).toEqual({ extract: true, review: true, transform: true, load: false });

    // The runs page filtered by status shows the filter it applies.
    await page.goto(`${app.url}/runs?status=failed`);
    await page.locator(`a[href="/runs/${rerunId}"]`).waitFor();
    expect(await page.getByLabel('Status').inputValue()).toBe('failed');
  });

  it("shows a step's logs and error with its secrets redacted; the page never holds the value", async () => {
    const value = 'wh-s3cr3t-9f2c';
    expect((await app.request('PUT', '/api/v1/secrets/WAREHOUSE_KEY', { as, body: { value } })).status).toBeLessThan(
      300,
    );
    const leaky = {
      id: 'leaky',
      steps: [
        {
          id: 'connect',
          plugin: 'script',
          with: {
            code: 'console.log("connecting with ${{ secrets.WAREHOUSE_KEY }}"); throw new Error("refused key ${{ secrets.WAREHOUSE_KEY }}");',
          },
        },
      ],
    };
    expect((await app.request('POST', '/api/v1/dags', { as, body: leaky })).status).toBe(201);
    const runId = await startRun(as, 'leaky');
    await page.goto(`${app.url}/runs/${runId}`);
    await page.getByTestId('run-status').filter({ hasText: 'failed' }).waitFor();
    await page.locator(stepState('connect', 'failed')).click();
    const detail = page.getByTestId('step-detail');
    await detail.getByTestId('step-logs').filter({ hasText: 'connecting with [redacted]' }).waitFor();
    expect(await detail.getByTestId('step-error').textContent()).toContain('refused key [redacted]');
    await page.getByTestId('chain-state').filter({ hasText: 'verified' }).waitFor();
    expect(await page.content()).not.toContain(value);
  });

  it('says when it is offline, then resumes from its cursor and shows what it missed', async () => {
    // The page's stream goes through a relay the test can cut: while cut, every connection is closed
    // at once; the server's messages to the page are recorded.
    const live = await context.newPage();
    let cut = false;
    const relays: { page: WebSocketRoute; server: WebSocketRoute }[] = [];
    const urls: string[] = [];
    const received: { url: string; msg: any }[] = [];
    await live.routeWebSocket(/\/api\/v1\/stream/, (ws) => {
      urls.push(ws.url());
      if (cut) return void ws.close({ code: 1001, reason: 'cut' });
      const server = ws.connectToServer();
      server.onMessage((m) => {
        if (cut) return;
        received.push({ url: ws.url(), msg: JSON.parse(String(m)) });
        ws.send(m);
      });
      relays.push({ page: ws, server });
    });
    try {
      const runId = await startRun(as, 'pipeline');
      // The page reads the run once when it opens and again once subscribed (a debounced read
      // that catches what happened between the two): the cut comes after that second read, or
      // the read would show what the cut is meant to hide.
      let runReads = 0;
      live.on('response', (r) => {
        if (new URL(r.url()).pathname === `/api/v1/runs/${runId}`) runReads++;
      });
      await live.goto(`${app.url}/runs/${runId}`);
      await live.locator(stepState('review', 'waiting')).waitFor();
      await live.getByTestId('live-state').filter({ hasText: 'Live' }).waitFor();
      while (runReads < 2) await new Promise((res) => setTimeout(res, 20));

      cut = true;
      for (const r of relays.splice(0)) {
        await r.server.close();
        await r.page.close({ code: 1001, reason: 'cut' });
      }
      await live.getByTestId('live-state').filter({ hasText: 'Offline' }).waitFor();
      await decide(runId);
      for (;;) {
        const r = await app.request('GET', `/api/v1/runs/${runId}`, { as });
        if (r.body.status === 'succeeded') break;
        await new Promise((res) => setTimeout(res, 50));
      }
      expect(await live.locator(stepState('load', 'pending')).count()).toBe(1);

      cut = false;
      for (const step of ['review', 'load']) await live.locator(stepState(step, 'succeeded')).waitFor();
      await live.getByTestId('live-state').filter({ hasText: 'Live' }).waitFor();
      const resumed = urls.at(-1)!;
      const since = new URL(resumed).searchParams.get('since');
      // The cursor it resumes from is the last one it was given: its first connection's start
      // position, or the last event that connection delivered.
      const known = received
        .filter((r) => r.url !== resumed && (r.msg.type === 'ready' || r.msg.type === 'event'))
        .map((r) => r.msg.cursor as string);
      expect(since).toBe(known.at(-1));
      // The events committed while it was cut come over the resumed connection, the run's end included.
      const after = received.filter((r) => r.url === resumed && r.msg.type === 'event' && r.msg.runId === runId);
      expect(after.map((r) => r.msg.event)).toEqual(expect.arrayContaining(['step.updated', 'run.completed']));
      expect(after.find((r) => r.msg.stepId === 'load' && r.msg.status === 'succeeded')).toBeDefined();
    } finally {
      await live.close();
    }
  });

  it('cancels a running run', async () => {
    const runId = await startRun(as, 'slow');
    await page.goto(`${app.url}/runs/${runId}`);
    await page.locator(stepState('wait', 'running')).waitFor();
    await page.getByRole('button', { name: 'Cancel run' }).click();
    await page.getByTestId('run-status').filter({ hasText: 'cancelled' }).waitFor();
    expect((await app.request('GET', `/api/v1/runs/${runId}`, { as })).body.status).toBe('cancelled');
    expect(await page.getByRole('button', { name: 'Cancel run' }).count()).toBe(0);
  });

  it("lists the tenant's DAGs and draws a version's graph", async () => {
    await page.getByRole('link', { name: 'DAGs' }).click();
    await page.getByRole('link', { name: 'pipeline' }).click();
    await page.getByRole('link', { name: 'v1' }).click();
    await page.locator('.graph [data-step="load"]').waitFor();
    expect(await page.locator('.graph [data-step]').count()).toBe(4);
    await expectAccessible();
    await screenshot(page, 'dag');
    await page.getByRole('link', { name: 'DAGs' }).click();
    await page.getByRole('link', { name: 'pipeline' }).waitFor();
    expect(await page.getByRole('link', { name: 'secret-dag' }).count()).toBe(0);
  });

  it("never shows another tenant's run, even by its address", async () => {
    await page.goto(`${app.url}/runs`);
    await page.locator('tr[data-run-id]').first().waitFor();
    await screenshot(page, 'runs');
    expect(await page.locator(`tr[data-run-id="${otherRunId}"]`).count()).toBe(0);
    await page.goto(`${app.url}/runs/${otherRunId}`);
    await page.getByRole('heading', { name: 'Run not found' }).waitFor();
    expect(await page.content()).not.toContain('secret-dag');
    await expectAccessible();
  });

  it('signs out: the session ends and the console asks for a token again', async () => {
    await page.goto(`${app.url}/runs`);
    await page.getByRole('button', { name: 'Sign out' }).click();
    await page.getByLabel('API token').waitFor();
    expect((await page.request.get(`${app.url}/api/v1/session`)).status()).toBe(401);
    expect(
      (await page.request.get(`${app.url}/api/v1/runs`, { headers: { 'x-tenant-id': app.tenantId } })).status(),
    ).toBe(401);
    await page.goto(`${app.url}/runs/${otherRunId}`);
    await page.getByLabel('API token').waitFor();
  });
});
