import { Inject, Injectable, type OnModuleDestroy, type OnModuleInit } from '@nestjs/common';
import type { WebSocket } from 'ws';
import type { OrdoConfig } from '../../core/config/config';
import { ORDO_CONFIG } from '../../core/config/config.module';
import { Database } from '../../core/database/database';
import { rootLogger } from '../../core/logging/logger';
import { metrics } from '../../core/telemetry/metrics';
import { PgStreamBus, RedisStreamBus, type StreamBus } from './stream-bus';
import { compareCursor, formatCursor, type Cursor } from './stream-cursor';
import { CLOSE, type StreamEvent, type SubscriptionFilter } from './stream.dto';
import { StreamRepository, type StreamEventRow } from './stream.repository';

/** One authenticated WebSocket: its tenant, token, position in the tenant's event order and filters. */
export interface StreamClient {
  ws: WebSocket;
  tenantId: string;
  jti: string;
  /** Token expiry (epoch seconds): the socket closes 4001 then. */
  exp: number;
  cursor: Cursor;
  subscriptions: Map<string, SubscriptionFilter>;
  closing: boolean;
}

interface TenantFeed {
  clients: Set<StreamClient>;
  pulling: boolean;
  again: boolean;
  /** The last pull saw committed events it could not deliver yet, or failed: pull again shortly. */
  heldBack: boolean;
  retry?: NodeJS.Timeout;
  retryDelay: number;
}

const BATCH = 500;
const AUTH_RECHECK_MS = 5_000;
/**
 * Every feed pulls at least this often: the engine sends its notifications right after its commits
 * (not in them), so a process that dies in between leaves a wake-up unsent; the events wait for
 * this pull at most.
 */
const SAFETY_PULL_MS = 5_000;

/**
 * Fans run events out to the process's WebSocket clients. One feed per tenant with clients pulls
 * the tenant's new events (one query per wake-up, whatever the number of clients) from the lowest
 * cursor among them and hands every client the events after its own cursor that match one of its
 * subscriptions. Wake-ups come from the bus (PostgreSQL LISTEN/NOTIFY, or Redis when REDIS_URL is set).
 */
@Injectable()
export class StreamHub implements OnModuleInit, OnModuleDestroy {
  /** Bytes queued on a socket beyond which the client is disconnected (4008) instead of buffering more. */
  maxBufferedBytes = 1024 * 1024;
  private readonly feeds = new Map<string, TenantFeed>();
  private readonly log = rootLogger().child({ component: 'stream' });
  private bus?: StreamBus;
  private recheck?: NodeJS.Timeout;
  private safetyPull?: NodeJS.Timeout;

  constructor(
    private readonly db: Database,
    private readonly repo: StreamRepository,
    @Inject(ORDO_CONFIG) private readonly config: OrdoConfig,
  ) {}

  async onModuleInit(): Promise<void> {
    const handlers = {
      events: (tenantId: string) => this.wake(tenantId),
      revoked: (tenantId: string, jti: string) => this.closeToken(tenantId, jti, 'token revoked'),
      resync: () => {
        for (const t of this.feeds.keys()) this.wake(t);
      },
    };
    this.bus = this.config.REDIS_URL
      ? new RedisStreamBus(this.config.REDIS_URL, this.db.urls.system, handlers, this.log)
      : new PgStreamBus(this.db.urls.system, handlers, this.log);
    await this.bus.start();
    this.recheck = setInterval(() => void this.recheckTokens(), AUTH_RECHECK_MS);
    this.recheck.unref();
    this.safetyPull = setInterval(() => {
      for (const t of this.feeds.keys()) this.wake(t);
    }, SAFETY_PULL_MS);
    this.safetyPull.unref();
  }

  async onModuleDestroy(): Promise<void> {
    if (this.recheck) clearInterval(this.recheck);
    if (this.safetyPull) clearInterval(this.safetyPull);
    for (const feed of this.feeds.values()) {
      if (feed.retry) clearTimeout(feed.retry);
      for (const c of feed.clients) this.close(c, CLOSE.GOING_AWAY, 'server shutting down');
    }
    this.feeds.clear();
    await this.bus?.stop();
  }

  get clientCount(): number {
    let n = 0;
    for (const f of this.feeds.values()) n += f.clients.size;
    return n;
  }

  add(client: StreamClient): void {
    let feed = this.feeds.get(client.tenantId);
    if (!feed) {
      feed = { clients: new Set(), pulling: false, again: false, heldBack: false, retryDelay: 100 };
      this.feeds.set(client.tenantId, feed);
    }
    feed.clients.add(client);
    metrics.streamConnections.set(this.clientCount);
  }

  remove(client: StreamClient): void {
    const feed = this.feeds.get(client.tenantId);
    if (!feed) return;
    feed.clients.delete(client);
    if (feed.clients.size === 0) {
      if (feed.retry) clearTimeout(feed.retry);
      this.feeds.delete(client.tenantId);
    }
    metrics.streamConnections.set(this.clientCount);
  }

  /**
   * Pulls the tenant's new events now (after a subscription, a notification or a resync). A
   * notification follows its commit, so the pull sees the notified events: delivered, or held back
   * behind an older transaction (then the feed looks again shortly).
   */
  wake(tenantId: string): void {
    const feed = this.feeds.get(tenantId);
    if (!feed) return;
    if (feed.pulling) {
      feed.again = true;
      return;
    }
    void this.pull(tenantId, feed);
  }

  private async pull(tenantId: string, feed: TenantFeed): Promise<void> {
    feed.pulling = true;
    try {
      do {
        feed.again = false;
        feed.heldBack = false;
        const active = [...feed.clients].filter((c) => c.subscriptions.size > 0 && !c.closing);
        if (active.length === 0) break;
        const from = active.reduce((min, c) => (compareCursor(c.cursor, min) < 0 ? c.cursor : min), active[0].cursor);
        const page = await this.db.withTenant(tenantId, (tx) => this.repo.eventsAfter(tx, from, BATCH));
        for (const row of page.rows) {
          this.deliver(tenantId, feed, row);
        }
        feed.heldBack = page.heldBack;
        if (page.rows.length === BATCH) feed.again = true;
      } while (feed.again && this.feeds.get(tenantId) === feed);
    } catch (e) {
      this.log.warn({ err: e, tenant: tenantId }, 'stream pull failed');
      feed.heldBack = true;
    } finally {
      feed.pulling = false;
    }
    // Events not deliverable yet wait for an older transaction to end: look again shortly.
    const waiting = feed.heldBack;
    if (waiting && this.feeds.get(tenantId) === feed && !feed.retry) {
      feed.retry = setTimeout(() => {
        feed.retry = undefined;
        this.wake(tenantId);
      }, feed.retryDelay);
      feed.retry.unref();
      feed.retryDelay = Math.min(feed.retryDelay * 2, 2000);
    } else if (!waiting) {
      feed.retryDelay = 100;
    }
  }

  private deliver(tenantId: string, feed: TenantFeed, row: StreamEventRow): void {
    const cursor = { xid: BigInt(row.stream_xid), id: BigInt(row.stream_id) };
    let message: StreamEvent | undefined;
    for (const c of feed.clients) {
      if (c.closing || c.subscriptions.size === 0 || compareCursor(cursor, c.cursor) <= 0) continue;
      c.cursor = cursor;
      message ??= toStreamEvent(tenantId, row, formatCursor(cursor));
      const matched = [...c.subscriptions].filter(([, f]) => matches(f, message!)).map(([id]) => id);
      if (matched.length > 0) this.send(c, { ...message, subscriptions: matched });
    }
  }

  /** Sends a message unless the socket's queue is over the cap, in which case the client is cut off (4008). */
  send(c: StreamClient, message: object): void {
    if (c.closing) return;
    if (c.ws.bufferedAmount > this.maxBufferedBytes) {
      this.close(c, CLOSE.SLOW_CONSUMER, 'slow consumer: send buffer over its cap');
      return;
    }
    c.ws.send(JSON.stringify(message));
  }

  close(c: StreamClient, code: number, reason: string): void {
    if (c.closing) return;
    c.closing = true;
    metrics.streamClosedTotal.inc({ code: String(code) });
    this.remove(c);
    c.ws.close(code, reason);
    // A client that never reads the close frame is dropped after a grace period.
    setTimeout(() => c.ws.terminate(), 10_000).unref();
  }

  private closeToken(tenantId: string, jti: string, reason: string): void {
    const feed = this.feeds.get(tenantId);
    if (!feed) return;
    for (const c of [...feed.clients]) if (c.jti === jti) this.close(c, CLOSE.UNAUTHORIZED, reason);
  }

  /** Closes clients whose token was revoked (missed notification), expired, or whose tenant was disabled. */
  private async recheckTokens(): Promise<void> {
    const clients = [...this.feeds.values()].flatMap((f) => [...f.clients]);
    if (clients.length === 0) return;
    const now = Date.now() / 1000;
    for (const c of clients) if (c.exp <= now) this.close(c, CLOSE.UNAUTHORIZED, 'token expired');
    const keys = new Map(
      clients.filter((c) => !c.closing).map((c) => [`${c.tenantId} ${c.jti}`, { tenantId: c.tenantId, jti: c.jti }]),
    );
    try {
      const invalid = await this.repo.invalidTokens(this.db.system, [...keys.values()]);
      for (const t of invalid) this.closeToken(t.tenantId, t.jti, 'token revoked or tenant disabled');
    } catch (e) {
      this.log.warn({ err: e }, 'stream token recheck failed');
    }
  }
}

const RUN_EVENT: Record<string, StreamEvent['event']> = {
  'run.running': 'run.started',
  'run.started': 'run.started',
  'run.succeeded': 'run.completed',
  'run.completed': 'run.completed',
  'run.failed': 'run.failed',
  'run.cancelled': 'run.cancelled',
};

/** Maps a stored run event (run.<status>, step.<status>, run.created, ...) to its stream form. */
export function toStreamEvent(tenant: string, row: StreamEventRow, cursor: string): StreamEvent {
  const data = row.data && typeof row.data === 'object' ? (row.data as Record<string, unknown>) : {};
  const suffix = row.type.slice(row.type.indexOf('.') + 1);
  const isStep = row.type.startsWith('step.');
  let status: string | null = typeof data.status === 'string' ? data.status : null;
  if (!status) {
    if (isStep || RUN_EVENT[row.type])
      status = suffix === 'started' ? 'running' : suffix === 'completed' ? 'succeeded' : suffix;
    else if (row.type === 'run.created') status = 'queued';
  }
  return {
    type: 'event',
    subscriptions: [],
    cursor,
    event: isStep ? 'step.updated' : (RUN_EVENT[row.type] ?? 'run.updated'),
    eventType: row.type,
    tenant,
    dagId: row.dag_id,
    runId: row.run_id,
    seq: row.seq,
    stepId: row.step_id,
    attempt: row.attempt,
    status,
    timestamp: row.created_at.toISOString(),
    traceId: row.trace_id,
  };
}

export function matches(f: SubscriptionFilter, e: StreamEvent): boolean {
  if (f.dagId !== undefined && f.dagId !== e.dagId) return false;
  if (f.runId !== undefined && f.runId !== e.runId) return false;
  if (f.status !== undefined && (e.status === null || !(f.status as string[]).includes(e.status))) return false;
  return true;
}
