import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { sql } from 'kysely';
import pg from 'pg';
import pino from 'pino';
import WebSocket from 'ws';
import { loadConfig } from '../../src/core/config/config';
import { StreamHub } from '../../src/modules/stream/stream-hub';
import { startOrdo, type RunningOrdo } from '../../src/ordo';
import { appendEvents, insertRun } from '../factories/run-events';
import { startTestApp, type TestApp } from '../support/test-app';

interface Msg {
  type: string;
  [k: string]: any;
}

/** A real WebSocket client that records messages and its close code. */
class Client {
  readonly messages: Msg[] = [];
  closed?: { code: number; reason: string };
  private waiters: (() => void)[] = [];

  constructor(readonly ws: WebSocket) {
    ws.on('message', (d) => {
      this.messages.push(JSON.parse((d as Buffer).toString('utf8')) as Msg);
      this.notify();
    });
    ws.on('close', (code, reason) => {
      this.closed = { code, reason: reason.toString() };
      this.notify();
    });
  }

  static async connect(url: string, headers: Record<string, string> = {}, query = ''): Promise<Client> {
    const ws = new WebSocket(`${url.replace('http', 'ws')}/api/v1/stream${query}`, { headers });
    const c = new Client(ws);
    await new Promise<void>((resolve, reject) => {
      ws.once('open', () => resolve());
      ws.once('error', reject);
      ws.once('unexpected-response', (_req, res) => reject(new Error(`HTTP ${res.statusCode}`)));
    });
    return c;
  }

  static async as(url: string, token: string, tenantId: string, query = ''): Promise<Client> {
    const c = await Client.connect(url, { authorization: `Bearer ${token}`, 'x-tenant-id': tenantId }, query);
    await c.waitFor((m) => m.type === 'ready');
    return c;
  }

  send(m: unknown): void {
    this.ws.send(typeof m === 'string' ? m : JSON.stringify(m));
  }

  events(): Msg[] {
    return this.messages.filter((m) => m.type === 'event');
  }

  private notify() {
    const w = this.waiters;
    this.waiters = [];
    for (const f of w) f();
  }

  async until(pred: () => boolean, what: string, ms = 10_000): Promise<void> {
    const deadline = Date.now() + ms;
    while (!pred()) {
      if (Date.now() > deadline)
        throw new Error(
          `timed out waiting for ${what}; got ${JSON.stringify(this.messages)} closed=${JSON.stringify(this.closed)}`,
        );
      await new Promise<void>((r) => {
        this.waiters.push(r);
        setTimeout(r, 100);
      });
    }
  }

  async waitFor(pred: (m: Msg) => boolean, what = 'a message'): Promise<Msg> {
    await this.until(() => this.messages.some(pred), what);
    return this.messages.find(pred)!;
  }

  async subscribe(id: string, filter: Record<string, unknown> = {}): Promise<Msg> {
    this.send({ type: 'subscribe', id, filter });
    return this.waitFor((m) => (m.type === 'subscribed' || m.type === 'error') && m.id === id, `subscription ${id}`);
  }

  async closedWith(): Promise<number> {
    await this.until(() => this.closed !== undefined, 'close');
    return this.closed!.code;
  }

  close() {
    this.ws.terminate();
  }
}

async function until(pred: () => boolean, what: string, ms = 15_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!pred()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** A masked client text frame (RFC 6455 §5.2), for the raw TCP client. */
function maskedFrame(text: string): Buffer {
  const payload = Buffer.from(text);
  if (payload.length > 125) throw new Error('short frames only');
  const mask = randomBytes(4);
  const body = Buffer.from(payload.map((b, i) => b ^ mask[i % 4]));
  return Buffer.concat([Buffer.from([0x81, 0x80 | payload.length]), mask, body]);
}

function jtiOf(token: string): string {
  return (JSON.parse(Buffer.from(token.split('.')[1], 'base64url').toString()) as { jti: string }).jti;
}

describe('WebSocket stream', () => {
  let app: TestApp;
  let second: RunningOrdo;
  let home2: string;
  const clients: Client[] = [];
  const track = (c: Client) => {
    clients.push(c);
    return c;
  };

  beforeAll(async () => {
    app = await startTestApp();
    // A second api replica: its own process state and pools, the same database and instance keys.
    home2 = fs.mkdtempSync(path.join(os.tmpdir(), 'ordo-home2-'));
    const config = loadConfig({
      ORDO_HOME: home2,
      ORDO_SIGNING_KEYS_DIR: path.join(app.config.home, 'keys'),
      PORT: '0',
      HOST: '127.0.0.1',
      ORDO_ROLES: 'api',
      LOG_LEVEL: 'silent',
    });
    second = await startOrdo(config, pino({ level: 'silent' }), {
      appUrl: app.testDb.appUrl,
      systemUrl: app.testDb.systemUrl,
      ownerUrl: app.testDb.ownerUrl,
    });
  });

  afterEach(() => {
    for (const c of clients.splice(0)) c.close();
  });

  afterAll(async () => {
    await second.close();
    fs.rmSync(home2, { recursive: true, force: true });
    await app.close();
  });

  it('delivers events written through one replica to a client of the other, with the stream fields', async () => {
    const c = track(await Client.as(second.url, app.adminToken, app.tenantId));
    expect((await c.subscribe('all')).type).toBe('subscribed');
    const run = await insertRun(app.ordo.database.system, app.tenantId, 'etl');
    await appendEvents(app.ordo.database.system, run, [
      { type: 'run.created' },
      { type: 'run.running' },
      { type: 'step.running', stepId: 'extract', attempt: 1 },
      { type: 'run.succeeded' },
    ]);
    await c.until(() => c.events().length >= 4, 'four events');
    const ev = c.events();
    expect(ev.map((e) => [e.event, e.status])).toEqual([
      ['run.updated', 'queued'],
      ['run.started', 'running'],
      ['step.updated', 'running'],
      ['run.completed', 'succeeded'],
    ]);
    expect(ev[2]).toMatchObject({
      tenant: app.tenantId,
      dagId: 'etl',
      runId: run.runId,
      stepId: 'extract',
      attempt: 1,
      traceId: run.traceId,
      subscriptions: ['all'],
      seq: 3,
    });
    expect(new Date(ev[0].timestamp).toISOString()).toBe(ev[0].timestamp);
    const cursors = ev.map((e) => e.cursor as string);
    expect(new Set(cursors).size).toBe(4);
  });

  it('delivers events whose notification was never sent (a writer that died after its commit) at the next safety pull', async () => {
    const c = track(await Client.as(app.url, app.adminToken, app.tenantId));
    expect((await c.subscribe('all')).type).toBe('subscribed');
    const db = app.ordo.database.system;
    const run = await insertRun(db, app.tenantId, 'unsent');
    const heard: string[] = [];
    const listener = new pg.Client({ connectionString: app.testDb.ownerUrl });
    await listener.connect();
    try {
      listener.on('notification', (n) => heard.push(n.payload ?? ''));
      await listener.query('listen ordo_run_event');
      // The engine's way of writing: notifications collected for after the commit, and here never sent.
      await db.transaction().execute(async (tx) => {
        await sql`select set_config('ordo.notify_after_commit', 'on', true)`.execute(tx);
        await appendEvents(tx as unknown as typeof db, run, [{ type: 'run.created' }, { type: 'run.running' }]);
      });
      await c.until(
        () => c.events().filter((e) => e.runId === run.runId).length === 2,
        'the unannounced events',
        8_000,
      );
      expect(heard.filter((p) => p.startsWith(`${app.tenantId} `))).toEqual([]);
    } finally {
      await listener.end();
    }
  });

  it('replays what a client missed when it reconnects with since, without duplicates', async () => {
    const db = app.ordo.database.system;
    const run = await insertRun(db, app.tenantId, 'replay');
    const first = track(await Client.as(app.url, app.adminToken, app.tenantId));
    await first.subscribe('r', { runId: run.runId });
    await appendEvents(db, run, [{ type: 'run.created' }, { type: 'run.running' }]);
    await first.until(() => first.events().length === 2, 'two events');
    const last = first.events()[1].cursor as string;
    first.close();

    // Written while no client is connected, and through the other replica's pool.
    await appendEvents(second.database.system, run, [
      { type: 'step.running', stepId: 'a' },
      { type: 'step.succeeded', stepId: 'a' },
    ]);
    await appendEvents(db, run, [{ type: 'run.succeeded' }]);

    const again = track(
      await Client.as(second.url, app.adminToken, app.tenantId, `?since=${encodeURIComponent(last)}`),
    );
    await again.subscribe('r', { runId: run.runId });
    await again.until(() => again.events().length === 3, 'three replayed events');
    await new Promise((r) => setTimeout(r, 300));
    expect(again.events().map((e) => e.seq)).toEqual([3, 4, 5]);
  });

  it('holds an event back while an older transaction is open, so cursors never skip a later commit', async () => {
    const db = app.ordo.database.system;
    const run = await insertRun(db, app.tenantId, 'fence');
    const c = track(await Client.as(app.url, app.adminToken, app.tenantId));
    await c.subscribe('f', { runId: run.runId });
    const older = new pg.Client({ connectionString: app.testDb.systemUrl });
    await older.connect();
    try {
      // The older transaction takes its transaction id first, then a younger one commits an event.
      await older.query('begin');
      await older.query('select pg_current_xact_id()');
      await appendEvents(db, run, [{ type: 'run.running' }]);
      await new Promise((r) => setTimeout(r, 700));
      expect(c.events()).toEqual([]);
      await older.query(
        `insert into run_event (tenant_id, run_id, seq, created_at, type, actor, data, prev_hash, hash)
         values ($1, $2, 100, now(), 'step.running', 'test', '{}', '', repeat('0', 64))`,
        [app.tenantId, run.runId],
      );
      await older.query('commit');
      await c.until(() => c.events().length === 2, 'both events');
      // Stream order is commit-safe order: the older transaction's event comes first.
      expect(c.events().map((e) => e.eventType)).toEqual(['step.running', 'run.running']);
    } finally {
      await older.end();
    }
  });

  it('filters by dagId and status', async () => {
    const db = app.ordo.database.system;
    const c = track(await Client.as(app.url, app.adminToken, app.tenantId));
    await c.subscribe('done', { dagId: 'billing', status: ['succeeded', 'failed'] });
    const other = await insertRun(db, app.tenantId, 'other-dag');
    const billing = await insertRun(db, app.tenantId, 'billing');
    await appendEvents(db, other, [{ type: 'run.running' }, { type: 'run.succeeded' }]);
    await appendEvents(db, billing, [
      { type: 'run.running' },
      { type: 'step.failed', stepId: 's' },
      { type: 'run.failed' },
    ]);
    await c.until(() => c.events().length >= 2, 'two matching events');
    await new Promise((r) => setTimeout(r, 300));
    expect(c.events().map((e) => [e.dagId, e.eventType])).toEqual([
      ['billing', 'step.failed'],
      ['billing', 'run.failed'],
    ]);
  });

  it('tenant B never receives tenant A events and cannot subscribe to A run', async () => {
    const db = app.ordo.database.system;
    const b = await app.tenant('stream-b', ['orchestrator:read']);
    const runA = await insertRun(db, app.tenantId, 'secret-dag');
    const cb = track(await Client.as(second.url, b.token, b.tenantId));
    const denied = await cb.subscribe('spy', { runId: runA.runId });
    expect(denied).toMatchObject({ type: 'error', code: 'RUN_NOT_FOUND' });
    await cb.subscribe('all');
    await appendEvents(db, runA, [{ type: 'run.running' }, { type: 'run.succeeded' }]);
    const runB = await insertRun(db, b.tenantId, 'b-dag');
    await appendEvents(db, runB, [{ type: 'run.running' }]);
    await cb.until(() => cb.events().length >= 1, 'B event');
    await new Promise((r) => setTimeout(r, 300));
    expect(cb.events().map((e) => [e.tenant, e.runId])).toEqual([[b.tenantId, runB.runId]]);

    // A's token with B's tenant header is refused at the upgrade.
    await expect(
      Client.connect(app.url, { authorization: `Bearer ${app.adminToken}`, 'x-tenant-id': b.tenantId }),
    ).rejects.toThrow('HTTP 403');
  });

  it('closes a socket with 4001 when its token is revoked while connected', async () => {
    const token = await app.token(app.tenantId, ['orchestrator:read']);
    const c = track(await Client.as(second.url, token, app.tenantId));
    await c.subscribe('all');
    const r = await app.request('POST', `/api/v1/tokens/${jtiOf(token)}/revoke`, {
      as: { token: app.adminToken, tenantId: app.tenantId },
    });
    expect(r.status).toBeLessThan(300);
    expect(await c.closedWith()).toBe(4001);
    await expect(
      Client.connect(app.url, { authorization: `Bearer ${token}`, 'x-tenant-id': app.tenantId }),
    ).rejects.toThrow('HTTP 401');
  });

  it('authenticates with a first auth message (no token in the URL) and refuses URL tokens', async () => {
    const c = track(await Client.connect(app.url));
    c.send({ type: 'auth', token: app.adminToken, tenantId: app.tenantId });
    await c.waitFor((m) => m.type === 'ready');
    expect((await c.subscribe('x')).type).toBe('subscribed');
    await expect(Client.connect(app.url, {}, `?token=${app.adminToken}`)).rejects.toThrow('HTTP 400');
    await expect(
      Client.connect(app.url, { authorization: 'Bearer not-a-jwt', 'x-tenant-id': app.tenantId }),
    ).rejects.toThrow('HTTP 401');
    const b = await app.tenant('stream-c', ['orchestrator:read']);
    const wrong = track(await Client.connect(app.url));
    wrong.send({ type: 'auth', token: b.token, tenantId: app.tenantId });
    expect(await wrong.closedWith()).toBe(4003);
  });

  it('answers malformed messages with errors, and closes 4400 when the first message is not auth', async () => {
    const c = track(await Client.as(app.url, app.adminToken, app.tenantId));
    c.send('{not json');
    c.send({ type: 'subscribe', id: 'a', filter: { runId: 'not-a-uuid' } });
    c.send({ type: 'subscribe', id: 'b', filter: { status: ['exploded'] } });
    c.send({ type: 'subscribe', id: 'c', filter: {}, extra: true });
    c.send({ type: 'unsubscribe', id: 'never' });
    c.send({ type: 'launch' });
    await c.until(() => c.messages.filter((m) => m.type === 'error').length === 6, 'six errors');
    const errors = c.messages.filter((m) => m.type === 'error').map((m) => m.code as string);
    expect(errors.sort()).toEqual([
      'INVALID_MESSAGE',
      'INVALID_MESSAGE',
      'INVALID_MESSAGE',
      'INVALID_MESSAGE',
      'INVALID_MESSAGE',
      'UNKNOWN_SUBSCRIPTION',
    ]);
    expect(c.closed).toBeUndefined();
    c.send({ type: 'ping' });
    await c.waitFor((m) => m.type === 'pong');

    const unauth = track(await Client.connect(app.url));
    unauth.send({ type: 'subscribe', id: 'x' });
    expect(await unauth.closedWith()).toBe(4400);
    await expect(
      Client.connect(app.url, { authorization: `Bearer ${app.adminToken}`, 'x-tenant-id': app.tenantId }, '?since=abc'),
    ).rejects.toThrow('HTTP 400');
  });

  it('closes a client that does not read with 4008 instead of buffering without bound', async () => {
    const hub = app.ordo.app.get(StreamHub, { strict: false });
    const cap = hub.maxBufferedBytes;
    hub.maxBufferedBytes = 64 * 1024;
    // A raw TCP client: handshake, subscribe, then stop reading.
    const u = new URL(app.url);
    const sock = net.connect(Number(u.port), u.hostname);
    await new Promise<void>((r) => sock.once('connect', () => r()));
    sock.write(
      [
        'GET /api/v1/stream HTTP/1.1',
        `Host: ${u.host}`,
        'Upgrade: websocket',
        'Connection: Upgrade',
        'Sec-WebSocket-Version: 13',
        `Sec-WebSocket-Key: ${randomBytes(16).toString('base64')}`,
        `Authorization: Bearer ${app.adminToken}`,
        `X-Tenant-Id: ${app.tenantId}`,
        '',
        '',
      ].join('\r\n'),
    );
    let received = Buffer.alloc(0);
    const onData = (d: Buffer) => {
      received = Buffer.concat([received, d]);
    };
    sock.on('data', onData);
    try {
      await until(() => received.includes('"type":"ready"'), 'ready');
      sock.write(maskedFrame(JSON.stringify({ type: 'subscribe', id: 'all' })));
      await until(() => received.includes('"type":"subscribed"'), 'subscribed');
      sock.pause();
      const before = hub.clientCount;
      const run = await insertRun(app.ordo.database.system, app.tenantId, 'flood');
      // Stream messages carry no event data (~350 bytes each): 40k of them outgrow the loopback buffers.
      for (let i = 0; i < 40 && hub.clientCount === before; i++) {
        await appendEvents(
          app.ordo.database.system,
          run,
          Array.from({ length: 1000 }, () => ({ type: 'step.running', stepId: 's' })),
        );
        await new Promise((r) => setTimeout(r, 50));
      }
      await until(() => hub.clientCount === before - 1, 'the server to drop the client');
      received = Buffer.alloc(0);
      sock.resume();
      // The close frame (opcode 8) carries code 4008 (0x0fa8) after the frames queued before it.
      await until(
        () => received.includes(Buffer.from([0x0f, 0xa8, ...Buffer.from('slow consumer')])),
        'close frame 4008',
      );
    } finally {
      hub.maxBufferedBytes = cap;
      sock.destroy();
    }
  });

  it('closes 4408 when no auth message arrives within 5 s', async () => {
    const c = track(await Client.connect(app.url));
    expect(await c.closedWith()).toBe(4408);
  });
});

describe('WebSocket stream fan-out through Redis (REDIS_URL set)', () => {
  const REDIS_URL = process.env.ORDO_TEST_REDIS_URL ?? 'redis://127.0.0.1:6379';
  let app: TestApp;
  let second: RunningOrdo;
  let home2: string;
  let redisUp = false;

  beforeAll(async () => {
    redisUp = await new Promise<boolean>((resolve) => {
      const u = new URL(REDIS_URL);
      const s = net.connect(Number(u.port || 6379), u.hostname);
      s.once('connect', () => {
        s.destroy();
        resolve(true);
      });
      s.once('error', () => resolve(false));
    });
    if (!redisUp) return;
    app = await startTestApp({ REDIS_URL });
    home2 = fs.mkdtempSync(path.join(os.tmpdir(), 'ordo-home2-'));
    const config = loadConfig({
      ORDO_HOME: home2,
      ORDO_SIGNING_KEYS_DIR: path.join(app.config.home, 'keys'),
      PORT: '0',
      HOST: '127.0.0.1',
      ORDO_ROLES: 'api',
      LOG_LEVEL: 'silent',
      REDIS_URL,
    });
    second = await startOrdo(config, pino({ level: 'silent' }), {
      appUrl: app.testDb.appUrl,
      systemUrl: app.testDb.systemUrl,
      ownerUrl: app.testDb.ownerUrl,
    });
  });

  afterAll(async () => {
    if (!redisUp) return;
    await second.close();
    fs.rmSync(home2, { recursive: true, force: true });
    await app.close();
  });

  it('delivers events to clients of both replicas while one of them relays notifications', async () => {
    if (!redisUp) {
      console.warn('Redis not reachable: fan-out through Redis not tested');
      return;
    }
    const a = await Client.as(app.url, app.adminToken, app.tenantId);
    const b = await Client.as(second.url, app.adminToken, app.tenantId);
    try {
      await a.subscribe('all');
      await b.subscribe('all');
      const run = await insertRun(app.ordo.database.system, app.tenantId, 'redis');
      await appendEvents(second.database.system, run, [{ type: 'run.running' }, { type: 'run.succeeded' }]);
      await a.until(() => a.events().length === 2, 'events on replica 1');
      await b.until(() => b.events().length === 2, 'events on replica 2');
      expect(a.events().map((e) => e.cursor)).toEqual(b.events().map((e) => e.cursor));
    } finally {
      a.close();
      b.close();
    }
  });
});
