import type { Browser, BrowserContext, Page } from 'playwright-core';
import { startTestApp, type TestApp } from '../support/test-app';
import { launchChromium, screenshot, seriousViolations } from './browser';

// The console's run page in headless Chromium against a real Ordo (api, worker and scheduler roles
// on a real PostgreSQL): the timeline of attempts, the ledger whose hash chain the browser checks,
// inputs and outputs by hash, and the flow actions (approve, reject, signal, replay) by scope.

const ORDER = {
  id: 'order',
  inputs: { type: 'object', properties: { orderId: { type: 'string' } } },
  steps: [
    { id: 'prepare', plugin: 'noop', with: { sleepMs: 300, output: { id: '${{ inputs.orderId }}' } } },
    { id: 'review', plugin: 'approval', dependsOn: ['prepare'], with: { message: 'ship it?' } },
    {
      id: 'paid',
      plugin: 'signal',
      dependsOn: ['review'],
      with: { name: 'payment.settled', correlationKey: 'order-${{ inputs.orderId }}' },
    },
    {
      id: 'ship',
      plugin: 'noop',
      dependsOn: ['paid'],
      with: { output: { amount: '${{ steps.paid.outputs.payload.amount }}' } },
    },
  ],
};

const FLAKY = {
  id: 'flaky',
  steps: [
    { id: 'first', plugin: 'noop', with: { output: { ok: true } } },
    {
      id: 'shaky',
      plugin: 'noop',
      dependsOn: ['first'],
      retry: { maxRetries: 1, initialDelay: '1s' },
      with: { fail: true, retryable: true },
    },
  ],
};

const GATE = { id: 'gate', steps: [{ id: 'decide', plugin: 'approval', with: { message: 'go?' } }] };

describe('web console: a run page', () => {
  let app: TestApp;
  let browser: Browser;
  let context: BrowserContext;
  let page: Page;
  let as: { token: string; tenantId: string };
  let orderRunId: string;

  const startRun = async (dagId: string, inputs: object = {}, who = as) => {
    const r = await app.request('POST', '/api/v1/runs', {
      as: who,
      body: { dagId, inputs, runToken: `${dagId}-${String(Math.random()).slice(2)}` },
    });
    expect(r.status).toBe(201);
    return r.body.runId as string;
  };
  const getRun = async (runId: string) => (await app.request('GET', `/api/v1/runs/${runId}`, { as })).body;
  const untilRun = async (runId: string, status: string) => {
    for (;;) {
      const r = await getRun(runId);
      if (r.status === status) return r;
      await new Promise((res) => setTimeout(res, 50));
    }
  };
  const stepState = (stepId: string, state: string) => `.graph [data-step="${stepId}"][data-state="${state}"]`;
  const expectAccessible = async (p = page) => expect(await seriousViolations(p)).toEqual([]);
  const signIn = async (p: Page, token: string) => {
    await p.goto(`${app.url}/runs`);
    await p.getByLabel('API token').fill(token);
    await p.getByRole('button', { name: 'Sign in' }).click();
    await p.getByRole('heading', { name: 'Runs' }).waitFor();
  };

  beforeAll(async () => {
    app = await startTestApp({ ORDO_ROLES: 'api,worker,scheduler' });
    as = { token: app.adminToken, tenantId: app.tenantId };
    for (const dag of [ORDER, FLAKY, GATE]) {
      const r = await app.request('POST', '/api/v1/dags', { as, body: dag });
      expect(r.status).toBe(201);
    }
    browser = await launchChromium();
    context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
    page = await context.newPage();
    await signIn(page, app.adminToken);
  });

  afterAll(async () => {
    await browser?.close();
    await app?.close();
  });

  it('approves a waiting approval step and sends the signal a signal step waits for, through the API', async () => {
    orderRunId = await startRun('order', { orderId: '1042' });
    await page.goto(`${app.url}/runs/${orderRunId}`);
    await page.locator(stepState('review', 'waiting')).click();
    const detail = page.getByTestId('step-detail');
    await detail.getByLabel('Comment (optional)').fill('looks right');
    await expectAccessible();
    await detail.getByRole('button', { name: 'Approve' }).click();
    await page.locator(stepState('review', 'succeeded')).waitFor();
    const review = (await getRun(orderRunId)).steps.find((s: any) => s.stepId === 'review');
    expect(review.outputs).toMatchObject({ decision: 'approved', comment: 'looks right' });

    await page.locator(stepState('paid', 'waiting')).click();
    await detail.getByText('Waits for the signal payment.settled with key order-1042').waitFor();
    await expectAccessible();
    await detail.getByLabel('Payload (JSON)').fill('{"amount": 12.5}');
    await detail.getByRole('button', { name: 'Send signal' }).click();
    await page.getByTestId('run-status').filter({ hasText: 'succeeded' }).waitFor();
    const run = await getRun(orderRunId);
    expect(JSON.stringify(run.steps.find((s: any) => s.stepId === 'ship').outputs)).toContain('12.5');
  });

  it('shows the inputs, their hash and each step\u2019s outputs hash as the API gives them', async () => {
    const run = await getRun(orderRunId);
    await page.getByTestId('inputs-hash').filter({ hasText: run.inputsHash }).waitFor();
    expect(JSON.parse((await page.getByTestId('run-inputs').textContent())!)).toEqual({ orderId: '1042' });
    const ship = run.steps.find((s: any) => s.stepId === 'ship');
    await page.locator(stepState('ship', 'succeeded')).click();
    await page.getByTestId('outputs-hash').filter({ hasText: ship.outputsHash }).waitFor();
    expect(await page.locator('tr[data-step="ship"] code.hash').getAttribute('title')).toBe(ship.outputsHash);
  });

  it("draws a timeline of the run's attempts with the same timings as the API, queue wait apart from execution", async () => {
    const attempts = (await app.request('GET', `/api/v1/runs/${orderRunId}/attempts`, { as })).body.items;
    expect(attempts.map((a: any) => a.stepId).sort()).toEqual(['paid', 'prepare', 'review', 'ship']);
    const gantt = page.getByTestId('gantt');
    await gantt.locator('[data-gantt-step="ship"] rect.exec').waitFor();
    for (const step of ['prepare', 'review', 'paid', 'ship'])
      expect(await gantt.locator(`[data-gantt-step="${step}"] rect.exec`).count()).toBe(1);
    // The bars run along one axis in the order the steps ran.
    const xOf = async (step: string) =>
      Number(await gantt.locator(`[data-gantt-step="${step}"] rect.exec`).getAttribute('x'));
    expect(await xOf('prepare')).toBeLessThan(await xOf('review'));
    expect(await xOf('paid')).toBeLessThan(await xOf('ship'));
    expect(await gantt.locator('rect.wait').count()).toBe(
      attempts.filter((a: any) => a.queuedUtc && a.queuedUtc < (a.startedUtc ?? a.claimedUtc)).length,
    );
    // The approval and signal steps waited for a decision and a signal, and are drawn as such.
    expect(await gantt.locator('rect.exec.awaiting').count()).toBe(2);
    for (const step of ['review', 'paid'])
      expect(await gantt.locator(`[data-gantt-step="${step}"] rect.exec.awaiting`).count()).toBe(1);
    await gantt.getByText('waiting for a decision or signal').waitFor();

    await gantt.getByText('Timings as a table').click();
    const table = gantt.getByTestId('gantt-table');
    await table.waitFor();
    expect(await table.locator('tbody tr').count()).toBe(attempts.length);
    const prepare = attempts.find((a: any) => a.stepId === 'prepare');
    const exec = Date.parse(prepare.finishedUtc) - Date.parse(prepare.startedUtc);
    const row = table.locator('tbody tr').filter({ hasText: 'prepare' });
    expect(await row.locator('td').nth(6).textContent()).toBe(
      exec < 1000 ? `${String(exec)} ms` : `${(exec / 1000).toFixed(2)} s`,
    );
    await expectAccessible();
    await page.getByRole('heading', { name: 'Timeline' }).scrollIntoViewIfNeeded();
    await screenshot(page, 'gantt');
  });

  it('shows a retried step as two attempts on its row', async () => {
    const runId = await startRun('flaky');
    await untilRun(runId, 'failed');
    await page.goto(`${app.url}/runs/${runId}`);
    const gantt = page.getByTestId('gantt');
    await gantt.locator('[data-gantt-step="shaky"] rect.exec.s-failed').nth(1).waitFor();
    expect(
      await gantt
        .locator('[data-gantt-step="shaky"] [data-attempt]')
        .evaluateAll((g) => g.map((x) => x.getAttribute('data-attempt'))),
    ).toEqual(['1', '2']);
    expect(await gantt.locator('[data-gantt-step="first"] rect.exec.s-succeeded').count()).toBe(1);
  });

  it("verifies the run's hash chain in the browser and lists each event with its hash", async () => {
    const run = await getRun(orderRunId);
    await page.goto(`${app.url}/runs/${orderRunId}`);
    const state = page.getByTestId('chain-state');
    await state.filter({ hasText: `Chain verified: ${String(run.lastEventSeq)} events` }).waitFor();
    expect(await state.textContent()).toContain(run.lastEventHash);
    const ledger = page.getByTestId('ledger');
    expect(await ledger.locator('tbody tr').count()).toBe(run.lastEventSeq);
    const events = (await app.request('GET', `/api/v1/runs/${orderRunId}/events?limit=1000`, { as })).body.items;
    expect(await ledger.locator('tr[data-seq="1"] code.hash').getAttribute('title')).toBe(events[0].hash);
    expect(await ledger.locator('tr[data-seq="1"]').textContent()).toContain('run.created');
    await expectAccessible();
    await page.getByRole('heading', { name: 'Ledger' }).scrollIntoViewIfNeeded();
    await screenshot(page, 'ledger');
  });

  it('selects a step of the graph from the keyboard', async () => {
    await page.goto(`${app.url}/runs/${orderRunId}`);
    const node = page.getByRole('group', { name: `Steps of run ${orderRunId}` }).getByRole('button', {
      name: 'review: succeeded',
    });
    await node.focus();
    await page.keyboard.press('Enter');
    await page
      .getByTestId('step-detail')
      .getByRole('heading', { name: /Step review/ })
      .waitFor();
    expect(await node.getAttribute('aria-pressed')).toBe('true');
    const ship = page.getByRole('button', { name: 'ship: succeeded' });
    await ship.focus();
    await page.keyboard.press(' ');
    await page
      .getByTestId('step-detail')
      .getByRole('heading', { name: /Step ship/ })
      .waitFor();
    expect(await ship.getAttribute('aria-pressed')).toBe('true');
    expect(await node.getAttribute('aria-pressed')).toBe('false');
  });

  it('names the first broken link when an event is altered on its way to the browser', async () => {
    const tampered = await context.newPage();
    try {
      // The API's answer is altered in transit: one event's data (the approval's comment) changes.
      let altered = 0;
      await tampered.route(`**/api/v1/runs/${orderRunId}/events**`, async (route) => {
        const res = await route.fetch();
        const body = await res.json();
        for (const e of body.items)
          if (e.type === 'step.decided') {
            e.data = { ...e.data, comment: 'approved by someone else' };
            altered = e.seq;
          }
        await route.fulfill({ response: res, json: body });
      });
      await tampered.goto(`${app.url}/runs/${orderRunId}`);
      const state = tampered.getByTestId('chain-state');
      await state.filter({ hasText: 'Chain broken' }).waitFor();
      expect(altered).toBeGreaterThan(0);
      expect(await state.textContent()).toBe(
        `✗ Chain broken at event ${String(altered)}: hash does not match the event`,
      );
      expect(await tampered.locator(`tr[data-seq="${String(altered)}"]`).getAttribute('class')).toBe('broken');

      // A dropped event breaks the next link.
      await tampered.unrouteAll();
      await tampered.route(`**/api/v1/runs/${orderRunId}/events**`, async (route) => {
        const res = await route.fetch();
        const body = await res.json();
        body.items.splice(2, 1);
        await route.fulfill({ response: res, json: body });
      });
      await tampered.reload();
      await state.filter({ hasText: 'Chain broken at event 4: expected seq 3' }).waitFor();
      await expectAccessible(tampered);
    } finally {
      await tampered.close();
    }
  });

  it('replays a run: a new run of the same version and inputs, linked to the first', async () => {
    await page.goto(`${app.url}/runs/${orderRunId}`);
    await page.getByRole('button', { name: 'Replay run' }).click();
    await page.waitForURL((url) => url.pathname.startsWith('/runs/') && !url.pathname.endsWith(orderRunId));
    const replayId = page.url().split('/').pop()!;
    await page.getByText('Replay of').waitFor();
    const replay = await getRun(replayId);
    expect(replay).toMatchObject({ replayOf: orderRunId, dagId: 'order', inputs: { orderId: '1042' } });
    expect(replay.inputsHash).toBe((await getRun(orderRunId)).inputsHash);
  });

  it('rejects an approval step: the run fails at it', async () => {
    const runId = await startRun('gate');
    await page.goto(`${app.url}/runs/${runId}`);
    await page.locator(stepState('decide', 'waiting')).click();
    await page.getByTestId('step-detail').getByRole('button', { name: 'Reject' }).click();
    await page
      .locator(stepState('decide', 'succeeded'))
      .or(page.locator(stepState('decide', 'failed')))
      .waitFor();
    const step = (await getRun(runId)).steps.find((s: any) => s.stepId === 'decide');
    expect(step.outputs).toMatchObject({ decision: 'rejected' });
  });

  it('shows no action to a read-only session, and the API refuses them to its token', async () => {
    const reader = await app.token(app.tenantId, ['orchestrator:read']);
    const runId = await startRun('gate');
    const ro = await browser.newContext({ viewport: { width: 1280, height: 900 } });
    try {
      const p = await ro.newPage();
      await signIn(p, reader);
      await p.goto(`${app.url}/runs/${runId}`);
      await p.locator(stepState('decide', 'waiting')).click();
      await p.getByTestId('step-detail').waitFor();
      await p.getByTestId('chain-state').filter({ hasText: 'Chain verified' }).waitFor();
      for (const name of ['Approve', 'Reject', 'Replay run', 'Cancel run', 'Send signal'])
        expect(await p.getByRole('button', { name }).count()).toBe(0);
      await expectAccessible(p);
    } finally {
      await ro.close();
    }
    const as2 = { token: reader, tenantId: app.tenantId };
    for (const [path, body] of [
      [`/api/v1/runs/${runId}/replay`, undefined],
      [`/api/v1/runs/${runId}/steps/decide/decision`, { decision: 'approved' }],
      ['/api/v1/signals', { name: 'x', correlationKey: 'y' }],
    ] as const)
      expect((await app.request('POST', path, { as: as2, body })).status).toBe(403);
  });

  it("never shows another tenant's attempts or ledger", async () => {
    const other = await app.tenant('console-run-other');
    const r = await app.request('POST', '/api/v1/dags', { as: other, body: GATE });
    expect(r.status).toBe(201);
    const otherRun = await startRun('gate', {}, other);
    for (const path of ['attempts', 'events'])
      expect((await app.request('GET', `/api/v1/runs/${otherRun}/${path}`, { as })).status).toBe(404);
    await page.goto(`${app.url}/runs/${otherRun}`);
    await page.getByRole('heading', { name: 'Run not found' }).waitFor();
    expect(await page.getByTestId('ledger').count()).toBe(0);
    expect(await page.getByTestId('gantt').count()).toBe(0);
  });
});
