import { Injectable, type OnModuleDestroy } from '@nestjs/common';
import pg from 'pg';
import { Database } from '../../core/database/database';
import { rootLogger } from '../../core/logging/logger';
import { AuthRepository, type TokenStatus } from './auth.repository';

const REVOKED_CHANNEL = 'ordo_token_revoked';
const TENANT_CHANNEL = 'ordo_tenant_status';
/** Entries are read again after this long even without a notification. */
const ENTRY_TTL_MS = 60_000;
const MAX_ENTRIES = 50_000;
/** How long a revocation waits for its own notification to come back (see `revoked`). */
const ECHO_WAIT_MS = 1_000;

interface Entry {
  status: TokenStatus;
  at: number;
}

/**
 * Revocation and tenant status of presented tenant tokens, known without a query while this
 * process LISTENs to the database: the api_token trigger notifies every revocation
 * (`ordo_token_revoked`), the tenant trigger every status change (`ordo_tenant_status`), and each
 * notification drops the entries it concerns on every replica. Only while the listening connection
 * is up are entries kept; when it is lost they are all dropped and every check reads the database
 * until it is back (and LISTENs again). A read that overlaps a notification is not kept, so an
 * answer older than a revocation is never cached after it. Unknown tokens are never cached.
 */
@Injectable()
export class TokenStatusCache implements OnModuleDestroy {
  private readonly entries = new Map<string, Entry>();
  /** Bumped by every notification, reconnect and loss: a read that saw it change is not kept. */
  private generation = 0;
  private client?: pg.Client;
  private listening = false;
  private started = false;
  private stopped = false;
  private retry?: NodeJS.Timeout;
  private delay = 250;
  private readonly echoes = new Map<string, () => void>();
  private readonly log = rootLogger().child({ component: 'token-status' });

  constructor(
    private readonly db: Database,
    private readonly repo: AuthRepository,
  ) {}

  async status(tenantId: string, jti: string): Promise<TokenStatus | undefined> {
    if (!this.started) this.start();
    const key = `${tenantId} ${jti}`;
    if (this.listening) {
      const e = this.entries.get(key);
      if (e && Date.now() - e.at < ENTRY_TTL_MS) return e.status;
    }
    const gen = this.generation;
    const status = await this.repo.tenantTokenStatus(this.db.system, tenantId, jti);
    if (status && this.listening && gen === this.generation) {
      if (this.entries.size >= MAX_ENTRIES) this.entries.delete(this.entries.keys().next().value!);
      this.entries.set(key, { status, at: Date.now() });
    }
    return status;
  }

  /**
   * Called by the process that revoked a token, after the commit: forgets it here at once, then
   * waits (bounded) until the revocation's notification comes back on this process's listening
   * connection. Every replica's listening connection is told at the same commit, so when the
   * revoking request answers, the other replicas have been told as well.
   */
  async revoked(tenantId: string, jti: string): Promise<void> {
    this.forget(`${tenantId} ${jti}`);
    if (!this.listening) return;
    const key = `${tenantId} ${jti}`;
    await new Promise<void>((resolve) => {
      const t = setTimeout(done, ECHO_WAIT_MS);
      t.unref();
      const prior = this.echoes.get(key);
      this.echoes.set(key, done);
      function done() {
        clearTimeout(t);
        prior?.();
        resolve();
      }
    });
  }

  async onModuleDestroy(): Promise<void> {
    this.stopped = true;
    if (this.retry) clearTimeout(this.retry);
    this.retry = undefined;
    this.lost();
    const c = this.client;
    this.client = undefined;
    if (c) {
      c.removeAllListeners();
      c.on('error', () => undefined);
      await c.end().catch(() => undefined);
    }
  }

  private start(): void {
    this.started = true;
    void this.connect();
  }

  private async connect(): Promise<void> {
    if (this.stopped) return;
    const c = new pg.Client({
      connectionString: this.db.urls.system,
      application_name: 'ordo:auth-listen',
      keepAlive: true,
    });
    const drop = (e?: unknown) => {
      if (e) this.log.warn({ err: e }, 'token status listener connection lost');
      this.dropped(c);
    };
    c.on('error', drop);
    c.on('end', () => drop());
    c.on('notification', (n) => this.notified(n.channel, n.payload ?? ''));
    try {
      await c.connect();
      await c.query(`listen ${REVOKED_CHANNEL}; listen ${TENANT_CHANNEL}`);
    } catch (e) {
      drop(e);
      return;
    }
    if (this.stopped) {
      c.removeAllListeners();
      c.on('error', () => undefined);
      await c.end().catch(() => undefined);
      return;
    }
    this.client = c;
    this.delay = 250;
    // Notifications sent before LISTEN took effect are not ours: start from an empty cache.
    this.entries.clear();
    this.generation++;
    this.listening = true;
  }

  private dropped(c: pg.Client): void {
    c.removeAllListeners();
    c.on('error', () => undefined);
    if (this.client === c || this.client === undefined) this.lost();
    if (this.client === c) this.client = undefined;
    void c.end().catch(() => undefined);
    if (this.stopped || this.retry) return;
    this.retry = setTimeout(() => {
      this.retry = undefined;
      void this.connect();
    }, this.delay);
    this.retry.unref();
    this.delay = Math.min(this.delay * 2, 5_000);
  }

  /** The listening connection is gone: nothing cached can be trusted any more. */
  private lost(): void {
    this.listening = false;
    this.entries.clear();
    this.generation++;
    for (const done of this.echoes.values()) done();
    this.echoes.clear();
  }

  private notified(channel: string, payload: string): void {
    if (channel === REVOKED_CHANNEL) {
      const [tenantId, jti] = payload.split(' ');
      if (!tenantId || !jti) return;
      const key = `${tenantId} ${jti}`;
      this.forget(key);
      const echo = this.echoes.get(key);
      this.echoes.delete(key);
      echo?.();
    } else if (channel === TENANT_CHANNEL) {
      this.generation++;
      const prefix = `${payload} `;
      for (const k of this.entries.keys()) if (k.startsWith(prefix)) this.entries.delete(k);
    }
  }

  private forget(key: string): void {
    this.generation++;
    this.entries.delete(key);
  }
}
