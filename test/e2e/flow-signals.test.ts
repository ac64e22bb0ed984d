import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { sql } from 'kysely';
import { JWS_FILE, KEY_FILE, MANIFEST_FILE, NDJSON_FILE } from '../../src/modules/export/export-format';
import { verifyExport } from '../../src/modules/export/export-verify';
import { verifyChain } from '../../src/modules/runs/run-events';
import { startTestApp, type TestApp } from '../support/test-app';
import { chainOf, runEvents, waitForRun } from './runs-support';

type Step = {
  stepId: string;
  status: string;
  dispatchSeq: number | null;
  outputs: unknown;
  outputsHash: string | null;
  error: { code: string } | null;
};
type Run = { runId: string; status: string; steps: Step[] };
type As = { token: string; tenantId: string };

/** Signal steps: they wait holding nothing; a signal (kept from before, or posted later) or the timeout moves the run on. */
describe('signal steps and signals', () => {
  let app: TestApp;
  let as: As;
  const publish = (body: unknown, who = as) => app.request('POST', '/api/v1/dags', { as: who, body });
  const start = async (dagId: string, inputs: unknown = {}, who = as) => {
    const r = await app.request('POST', '/api/v1/runs', {
      as: who,
      body: { dagId, inputs, runToken: `${dagId}-${Math.random()}` },
    });
    expect(r.status).toBe(201);
    return r.body.runId as string;
  };
  const run = async (runId: string, who = as) =>
    (await app.request('GET', `/api/v1/runs/${runId}`, { as: who })).body as Run;
  const step = (r: { steps: Step[] }, id: string) => r.steps.find((s) => s.stepId === id)!;
  const waitFor = async (runId: string, stepId: string, status: string, who = as) => {
    for (let i = 0; i < 400; i++) {
      if (step(await run(runId, who), stepId).status === status) return;
      await new Promise((r) => setTimeout(r, 25));
    }
    throw new Error(`${stepId} never became ${status}`);
  };
  const signal = (body: unknown, who = as) => app.request('POST', '/api/v1/signals', { as: who, body });
  const getSignal = (id: string, who = as) => app.request('GET', `/api/v1/signals/${id}`, { as: who });
  const count = async (table: 'signal' | 'signal_wait') =>
    app.ordo.database.withSystem(
      async (tx) =>
        (await sql<{ n: number }>`select count(*)::int as n from ${sql.table(table)}`.execute(tx)).rows[0].n,
    );
  /** Waits until the step's wait is registered (the engine's signal_wait job ran). */
  const registered = async (runId: string, stepId: string) => {
    for (let i = 0; i < 400; i++) {
      const n = await app.ordo.database.withSystem(
        async (tx) =>
          (
            await sql<{ n: number }>`select count(*)::int as n from signal_wait
              where run_id = ${runId} and step_id = ${stepId}`.execute(tx)
          ).rows[0].n,
      );
      if (n > 0) return;
      await new Promise((r) => setTimeout(r, 25));
    }
    throw new Error(`the wait of ${stepId} was never registered`);
  };
  let seq = 0;
  const key = () => `order-${process.pid}-${++seq}`;

  beforeAll(async () => {
    app = await startTestApp({ ORDO_ROLES: 'api,worker,scheduler' });
    as = { token: app.adminToken, tenantId: app.tenantId };
    expect(
      (
        await publish({
          id: 'checkout',
          steps: [
            { id: 'order', plugin: 'noop', with: { output: { id: '${{ inputs.orderId }}' } } },
            {
              id: 'paid',
              plugin: 'signal',
              dependsOn: ['order'],
              with: { name: 'payment.settled', correlationKey: 'order-${{ steps.order.outputs.id }}' },
            },
            {
              id: 'ship',
              plugin: 'noop',
              dependsOn: ['paid'],
              with: { output: { amount: '${{ steps.paid.outputs.payload.amount }}' } },
            },
          ],
        })
      ).status,
    ).toBe(201);
  });
  afterAll(async () => app?.close());

  it('waits holding no slot and no lease, then succeeds with the signal; the ledger records it and verifies', async () => {
    const k = key();
    const runId = await start('checkout', { orderId: k });
    await waitFor(runId, 'paid', 'waiting');
    const held = await app.ordo.database.withSystem(
      async (tx) =>
        (await sql<{ n: number }>`select count(*)::int as n from queue_item where run_id = ${runId}`.execute(tx))
          .rows[0].n,
    );
    expect(held).toBe(0);
    await registered(runId, 'paid');

    const s = await signal({
      signalId: `pay-${k}`,
      name: 'payment.settled',
      correlationKey: `order-${k}`,
      payload: { amount: 42 },
    });
    expect(s.status).toBe(201);
    expect(s.body).toMatchObject({
      signalId: `pay-${k}`,
      status: 'delivered',
      delivery: { runId, stepId: 'paid' },
      payload: { amount: 42 },
    });
    const done = (await waitForRun(app, as, runId)) as Run;
    expect(done.status).toBe('succeeded');
    expect(step(done, 'paid').outputs).toEqual({
      payload: { amount: 42 },
      signalId: `pay-${k}`,
      receivedAt: s.body.receivedUtc,
    });
    expect(step(done, 'ship').outputs).toEqual({ amount: 42 });

    const ev = await runEvents(app, as, runId);
    expect(ev.find((e) => e.type === 'step.waiting')?.data).toEqual({
      kind: 'signal',
      name: 'payment.settled',
      correlationKey: `order-${k}`,
    });
    const signalled = ev.find((e) => e.type === 'step.signalled')!;
    expect(signalled).toMatchObject({ stepId: 'paid', actor: s.body.sentBy });
    expect(signalled.data).toEqual({
      signalId: `pay-${k}`,
      name: 'payment.settled',
      correlationKey: `order-${k}`,
      payload: { amount: 42 },
      receivedAt: s.body.receivedUtc,
    });
    expect(verifyChain(chainOf(ev, as.tenantId, runId))).toEqual({ ok: true });

    const g = await getSignal(`pay-${k}`);
    expect(g.status).toBe(200);
    expect(g.body).toEqual(s.body);
  });

  it('carries the delivery into the signed NDJSON export, which verifies', async () => {
    const k = key();
    const runId = await start('checkout', { orderId: k });
    await registered(runId, 'paid');
    const s = await signal({
      signalId: `exp-${k}`,
      name: 'payment.settled',
      correlationKey: `order-${k}`,
      payload: { amount: 11 },
    });
    await waitForRun(app, as, runId);
    const r = await app.request('GET', '/api/v1/export', { as });
    expect(r.status).toBe(200);
    const lines = r.text.split('\n').filter(Boolean);
    const last = JSON.parse(lines.pop()!) as { manifest: unknown; jws: string; publicJwk: unknown };
    const records = lines.map((l) => JSON.parse(l) as Record<string, unknown>);
    const ev = records.find((x) => x.runId === runId && x.type === 'event' && x.eventType === 'step.signalled');
    expect(ev).toMatchObject({
      stepId: 'paid',
      actor: s.body.sentBy,
      data: { signalId: `exp-${k}`, payload: { amount: 11 } },
    });
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ordo-signals-'));
    try {
      fs.writeFileSync(path.join(dir, NDJSON_FILE), lines.map((l) => `${l}\n`).join(''));
      fs.writeFileSync(path.join(dir, MANIFEST_FILE), JSON.stringify(last.manifest));
      fs.writeFileSync(path.join(dir, JWS_FILE), last.jws);
      fs.writeFileSync(path.join(dir, KEY_FILE), JSON.stringify(last.publicJwk));
      expect(await verifyExport(dir)).toMatchObject({ ok: true });
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('keeps a signal that arrives before its step waits, and delivers it when the step starts waiting', async () => {
    const k = key();
    const s = await signal({
      signalId: `early-${k}`,
      name: 'payment.settled',
      correlationKey: `order-${k}`,
      payload: { amount: 7 },
    });
    expect(s.status).toBe(201);
    expect(s.body).toMatchObject({ status: 'pending', delivery: null });
    expect((await getSignal(`early-${k}`)).body.status).toBe('pending');

    const runId = await start('checkout', { orderId: k });
    const done = (await waitForRun(app, as, runId)) as Run;
    expect(done.status).toBe('succeeded');
    expect(step(done, 'ship').outputs).toEqual({ amount: 7 });
    expect((await getSignal(`early-${k}`)).body).toMatchObject({
      status: 'delivered',
      delivery: { runId, stepId: 'paid' },
    });
    // One signal, one step: a second run of the same key waits.
    const second = await start('checkout', { orderId: k });
    await waitFor(second, 'paid', 'waiting');
    await registered(second, 'paid');
    expect(step(await run(second), 'paid').status).toBe('waiting');
  });

  it('hands signals of one key to the waiting steps in the order they started waiting, oldest signal first', async () => {
    const k = key();
    const first = await start('checkout', { orderId: k });
    await registered(first, 'paid');
    const second = await start('checkout', { orderId: k });
    await registered(second, 'paid');
    const a = await signal({ name: 'payment.settled', correlationKey: `order-${k}`, payload: { amount: 1 } });
    const b = await signal({ name: 'payment.settled', correlationKey: `order-${k}`, payload: { amount: 2 } });
    expect(a.body.delivery.runId).toBe(first);
    expect(b.body.delivery.runId).toBe(second);
    expect(a.body.signalId).toMatch(/^[0-9a-f-]{36}$/);
    expect(step((await waitForRun(app, as, first)) as Run, 'ship').outputs).toEqual({ amount: 1 });
    expect(step((await waitForRun(app, as, second)) as Run, 'ship').outputs).toEqual({ amount: 2 });
  });

  it('is idempotent on the signal id: the same content answers the signal again, other content is 409; neither writes', async () => {
    const k = key();
    const body = {
      signalId: `dup-${k}`,
      name: 'payment.settled',
      correlationKey: `order-${k}`,
      payload: { amount: 3, c: 'x' },
    };
    const s = await signal(body);
    expect(s.status).toBe(201);
    const before = await count('signal');
    const again = await signal({ ...body, payload: { c: 'x', amount: 3 } });
    expect(again.status).toBe(200);
    expect(again.body).toEqual(s.body);
    for (const other of [{ payload: { amount: 4 } }, { correlationKey: `other-${k}` }, { name: 'payment.refunded' }]) {
      const c = await signal({ ...body, ...other });
      expect(c.status).toBe(409);
      expect(c.body.error.code).toBe('SIGNAL_CONFLICT');
    }
    expect(await count('signal')).toBe(before);
    expect((await getSignal(`dup-${k}`)).body).toEqual(s.body);

    // Delivered since: the same post answers the delivery and does not deliver again.
    const runId = await start('checkout', { orderId: k });
    await waitForRun(app, as, runId);
    const replay = await signal(body);
    expect(replay.status).toBe(200);
    expect(replay.body).toMatchObject({ status: 'delivered', delivery: { runId, stepId: 'paid' } });
    const signalled = (await runEvents(app, as, runId)).filter((e) => e.type === 'step.signalled');
    expect(signalled).toHaveLength(1);
  });

  it('refuses bad signals with clear 4xx codes and writes nothing', async () => {
    const before = await count('signal');
    const cases: [unknown, number][] = [
      [{ correlationKey: 'k', payload: {} }, 400],
      [{ name: '', correlationKey: 'k' }, 400],
      [{ name: 'bad name!', correlationKey: 'k' }, 400],
      [{ name: 'n', correlationKey: '' }, 400],
      [{ name: 'n', correlationKey: 'a\u0000b' }, 400],
      [{ name: 'n', correlationKey: 'x'.repeat(501) }, 400],
      [{ name: 'n', correlationKey: 'k', signalId: 'has space' }, 400],
      [{ name: 'n', correlationKey: 'k', extra: 1 }, 400],
      [{ name: 'n', correlationKey: 'k', payload: { blob: 'x'.repeat(70_000) } }, 413],
    ];
    for (const [body, status] of cases) {
      const r = await signal(body);
      expect([JSON.stringify(body).slice(0, 80), r.status]).toEqual([JSON.stringify(body).slice(0, 80), status]);
      expect(r.body.error.code).toEqual(expect.any(String));
    }
    expect(
      (await signal({ name: 'n', correlationKey: 'k', payload: { blob: 'x'.repeat(70_000) } })).body.error.code,
    ).toBe('SIGNAL_PAYLOAD_TOO_LARGE');
    const reader = { tenantId: as.tenantId, token: await app.token(as.tenantId, ['orchestrator:read']) };
    expect((await signal({ name: 'n', correlationKey: 'k' }, reader)).status).toBe(403);
    expect(await count('signal')).toBe(before);
    expect((await getSignal('no-such-signal')).status).toBe(404);
  });

  it("never delivers a signal of one tenant to another tenant's step", async () => {
    const other = await app.tenant('signals-other');
    expect(
      (
        await publish(
          {
            id: 'checkout',
            steps: [{ id: 'paid', plugin: 'signal', with: { name: 'payment.settled', correlationKey: 'shared-key' } }],
          },
          other,
        )
      ).status,
    ).toBe(201);
    const theirs = await start('checkout', {}, other);
    await waitFor(theirs, 'paid', 'waiting', other);
    await registered(theirs, 'paid');

    const mine = await signal({
      signalId: 'cross-1',
      name: 'payment.settled',
      correlationKey: 'shared-key',
      payload: { to: 'a' },
    });
    expect(mine.status).toBe(201);
    expect(mine.body).toMatchObject({ status: 'pending', delivery: null });
    expect(step(await run(theirs, other), 'paid').status).toBe('waiting');
    // Tenant B sees no signal of A's, and A's run does not exist for B.
    expect((await getSignal('cross-1', other)).status).toBe(404);
    expect((await getSignal('cross-1', other)).body.error.code).toBe('SIGNAL_NOT_FOUND');
    // B's own signal with the same id is B's (ids are per tenant), and goes to B's step.
    const theirSignal = await signal(
      { signalId: 'cross-1', name: 'payment.settled', correlationKey: 'shared-key', payload: { to: 'b' } },
      other,
    );
    expect(theirSignal.status).toBe(201);
    expect(theirSignal.body).toMatchObject({ status: 'delivered', delivery: { runId: theirs, stepId: 'paid' } });
    expect(step((await waitForRun(app, other, theirs)) as Run, 'paid').outputs).toMatchObject({ payload: { to: 'b' } });
    expect((await getSignal('cross-1')).body).toMatchObject({ status: 'pending', payload: { to: 'a' } });
  });

  it('succeeds with the default payload at the timeout, or fails with SIGNAL_TIMEOUT without one', async () => {
    expect(
      (
        await publish({
          id: 'timed-signal',
          steps: [
            {
              id: 'dflt',
              plugin: 'signal',
              with: { name: 'never', correlationKey: 'x', timeout: '300ms', defaultPayload: { ok: false } },
            },
            { id: 'none', plugin: 'signal', with: { name: 'never', correlationKey: 'y', timeout: '300ms' } },
          ],
        })
      ).status,
    ).toBe(201);
    const runId = await start('timed-signal');
    const done = (await waitForRun(app, as, runId, 30_000)) as Run;
    expect(done.status).toBe('failed');
    expect(step(done, 'dflt')).toMatchObject({
      status: 'succeeded',
      outputs: { payload: { ok: false }, signalId: null, receivedAt: null },
    });
    expect(step(done, 'none').error?.code).toBe('SIGNAL_TIMEOUT');
    const ev = await runEvents(app, as, runId);
    expect(
      ev
        .filter((e) => e.type === 'step.timed_out')
        .map((e) => e.stepId)
        .sort(),
    ).toEqual(['dflt', 'none']);
    // A signal after the timeout is kept, not delivered to the step that timed out.
    const late = await signal({ name: 'never', correlationKey: 'y' });
    expect(late.body.status).toBe('pending');
  });

  it('cancels a waiting signal step with its run; a later signal is kept', async () => {
    const k = key();
    const runId = await start('checkout', { orderId: k });
    await registered(runId, 'paid');
    expect((await app.request('POST', `/api/v1/runs/${runId}/cancel`, { as })).status).toBe(200);
    const s = await signal({ name: 'payment.settled', correlationKey: `order-${k}` });
    expect(s.body.status).toBe('pending');
    expect(step(await run(runId), 'paid').status).toBe('cancelled');
  });

  it('meets a signal posted while the step starts waiting, whichever of the two takes the key first', async () => {
    const k = key();
    let runId = '';
    let posted: Promise<{ status: number; body: any }> | undefined;
    // Holding the key's lock: the step goes waiting, the engine's registration of its wait and the
    // post of the signal both queue behind the lock, and then run in either order.
    await app.ordo.database.withSystem(async (tx) => {
      await sql`select pg_advisory_xact_lock(hashtextextended(jsonb_build_array(${as.tenantId}::text, 'payment.settled'::text, ${`order-${k}`}::text)::text, 30))`.execute(
        tx,
      );
      runId = await start('checkout', { orderId: k });
      await waitFor(runId, 'paid', 'waiting');
      posted = signal({ name: 'payment.settled', correlationKey: `order-${k}`, payload: { amount: 9 } });
      await new Promise((r) => setTimeout(r, 200));
    });
    const s = await posted!;
    expect(s.status).toBe(201);
    const done = (await waitForRun(app, as, runId)) as Run;
    expect(done.status).toBe('succeeded');
    expect(step(done, 'ship').outputs).toEqual({ amount: 9 });
    expect((await getSignal(s.body.signalId)).body).toMatchObject({
      status: 'delivered',
      delivery: { runId, stepId: 'paid' },
    });
    const left = await app.ordo.database.withSystem(
      async (tx) =>
        (await sql<{ n: number }>`select count(*)::int as n from signal_wait where run_id = ${runId}`.execute(tx))
          .rows[0].n,
    );
    expect(left).toBe(0);
  });

  it('loses no signal that arrives while its step starts waiting', async () => {
    // Signals posted at every moment around the step's start of waiting: each is delivered once.
    for (let i = 0; i < 8; i++) {
      const k = key();
      const runId = await start('checkout', { orderId: k });
      await new Promise((r) => setTimeout(r, i * 15));
      const s = await signal({ name: 'payment.settled', correlationKey: `order-${k}`, payload: { amount: i } });
      expect(s.status).toBe(201);
      const done = (await waitForRun(app, as, runId)) as Run;
      expect(done.status).toBe('succeeded');
      expect(step(done, 'ship').outputs).toEqual({ amount: i });
      expect((await getSignal(s.body.signalId)).body).toMatchObject({ status: 'delivered', delivery: { runId } });
    }
  });

  it('gives the same dispatch order, events and hashes on every run of the same DAG, inputs and signal', async () => {
    const shape = async (runId: string) => {
      const r = (await waitForRun(app, as, runId)) as Run & { outputsHash: string };
      return {
        steps: r.steps
          .map((x) => [x.stepId, x.status, x.dispatchSeq, x.stepId === 'paid' ? null : x.outputsHash])
          .sort(),
        paid: (step(r, 'paid').outputs as { payload: unknown }).payload,
        // The signal's id and time are the signal's own (each run gets its own signal); the rest is the same.
        events: (await runEvents(app, as, runId)).map((e) => [
          e.type,
          e.stepId,
          e.type === 'step.signalled' ? { ...e.data, signalId: null, receivedAt: null } : null,
        ]),
      };
    };
    let want: unknown;
    for (let i = 0; i < 20; i++) {
      const runId = await start('checkout', { orderId: 'same' });
      await registered(runId, 'paid');
      const s = await signal({ name: 'payment.settled', correlationKey: 'order-same', payload: { amount: 5 } });
      expect(s.body.delivery.runId).toBe(runId);
      const got = await shape(runId);
      if (i === 0) want = got;
      else expect(got).toEqual(want);
    }
  });
});
