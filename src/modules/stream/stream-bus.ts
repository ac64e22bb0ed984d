import { Redis } from 'ioredis';
import { PgListener } from '../../core/database/pg-listener';
import type { Logger } from 'pino';

/** What the bus reports: a tenant has new run events, a token was revoked, wake-ups may have been missed. */
export interface StreamBusHandlers {
  events(tenantId: string, maxStreamId: number): void;
  revoked(tenantId: string, jti: string): void;
  /** (Re)connected: notifications sent while disconnected are lost, so every feed pulls once. */
  resync(): void;
}

export interface StreamBus {
  start(): Promise<void>;
  stop(): Promise<void>;
}

const EVENT_CHANNEL = 'ordo_run_event';
const REVOKED_CHANNEL = 'ordo_token_revoked';
const REDIS_CHANNEL = 'ordo:stream';
const RESYNC = 'resync';
// Only one process relays PostgreSQL notifications into Redis at a time (session advisory lock).
const RELAY_LOCK = 7_262_007;

function dispatch(h: StreamBusHandlers, channel: string, payload: string | undefined): void {
  if (channel === RESYNC) {
    h.resync();
    return;
  }
  const [tenant, id] = (payload ?? '').split(' ');
  if (!tenant || !id) return;
  if (channel === EVENT_CHANNEL) h.events(tenant, Number(id));
  else if (channel === REVOKED_CHANNEL) h.revoked(tenant, id);
}

/** Default fan-out: every api replica LISTENs on PostgreSQL; the run_event trigger NOTIFYs. */
export class PgStreamBus implements StreamBus {
  private readonly listener: PgListener;

  constructor(url: string, handlers: StreamBusHandlers, log: Logger) {
    this.listener = new PgListener({
      url,
      applicationName: 'ordo:stream-listen',
      channels: [EVENT_CHANNEL, REVOKED_CHANNEL],
      onNotification: (ch, p) => dispatch(handlers, ch, p),
      // Notifications may have been missed while no connection listened: every feed pulls once.
      onConnected: () => handlers.resync(),
      log,
    });
  }

  async start(): Promise<void> {
    await this.listener.start();
  }

  async stop(): Promise<void> {
    await this.listener.stop();
  }
}

/**
 * With REDIS_URL: replicas subscribe to one Redis channel, and a single replica (holder of a
 * PostgreSQL advisory lock, re-contested every few seconds) relays the database notifications
 * into it, so the database serves one LISTEN connection however many replicas run.
 */
export class RedisStreamBus implements StreamBus {
  private sub?: Redis;
  private pub?: Redis;
  private relay?: PgListener;
  private contest?: NodeJS.Timeout;
  private stopped = false;

  constructor(
    private readonly redisUrl: string,
    private readonly pgUrl: string,
    private readonly handlers: StreamBusHandlers,
    private readonly log: Logger,
  ) {}

  async start(): Promise<void> {
    this.stopped = false;
    const opts = { lazyConnect: true, maxRetriesPerRequest: 2, enableOfflineQueue: true };
    this.sub = new Redis(this.redisUrl, opts);
    this.pub = new Redis(this.redisUrl, opts);
    for (const r of [this.sub, this.pub]) r.on('error', (e) => this.log.warn({ err: e }, 'redis stream bus error'));
    this.sub.on('message', (_ch: string, msg: string) => {
      const i = msg.indexOf(':');
      dispatch(this.handlers, msg.slice(0, i), msg.slice(i + 1));
    });
    // After a Redis reconnect messages may have been lost: every feed pulls once.
    this.sub.on('ready', () => this.handlers.resync());
    await Promise.all([this.sub.connect(), this.pub.connect()]);
    await this.sub.subscribe(REDIS_CHANNEL);
    await this.tryRelay();
    this.contest = setInterval(() => void this.tryRelay(), 3000);
    this.contest.unref();
  }

  private async tryRelay(): Promise<void> {
    if (this.stopped || this.relay?.connected) return;
    await this.relay?.stop();
    const relay = new PgListener({
      url: this.pgUrl,
      applicationName: 'ordo:stream-listen',
      channels: [EVENT_CHANNEL, REVOKED_CHANNEL],
      onNotification: (ch, payload) => void this.pub?.publish(REDIS_CHANNEL, `${ch}:${payload}`).catch(() => undefined),
      // A new relay may have missed notifications while there was none: every replica pulls once.
      onConnected: () => void this.pub?.publish(REDIS_CHANNEL, `${RESYNC}:`).catch(() => undefined),
      log: this.log,
      beforeListen: async (c) =>
        (await c.query<{ ok: boolean }>('select pg_try_advisory_lock($1) as ok', [RELAY_LOCK])).rows[0].ok,
    });
    this.relay = (await relay.start()) ? relay : undefined;
    if (!this.relay) await relay.stop();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.contest) clearInterval(this.contest);
    await this.relay?.stop();
    this.sub?.disconnect();
    this.pub?.disconnect();
  }
}
