import { Injectable, type OnModuleDestroy } from '@nestjs/common';
import { randomUUID } from 'node:crypto';
import { Database } from '../../core/database/database';
import { type DomainError, forbidden, unauthorized } from '../../core/errors/domain-error';
import { PgListener } from '../../core/database/pg-listener';
import { rootLogger } from '../../core/logging/logger';
import { AuthRepository, type TokenStatus } from './auth.repository';

const REVOKED_CHANNEL = 'ordo_token_revoked';
const TENANT_CHANNEL = 'ordo_tenant_status';
/** Each listener's answer to a revocation, once it dropped the token: "<tenant> <jti>". */
const ACK_CHANNEL = 'ordo_token_revoked_ack';
/** The listening connections' application_name: a revoker counts them to know how many answers to wait for. */
export const LISTENER_NAME = 'ordo:auth-listen';
/** Entries are read again after this long even without a notification. */
const ENTRY_TTL_MS = 60_000;
const MAX_ENTRIES = 50_000;
/** How long a revocation waits for the listeners' answers (see `revoked`). */
const ACK_WAIT_MS = 2_000;
const MAX_ACKS = 10_000;

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
 *
 * Every listener answers each revocation notification once it has dropped the token
 * (`ordo_token_revoked_ack`), and the revoking request waits for as many answers as there are
 * listening connections on the database: when it returns, every replica refuses the token. A
 * tenant's status change is announced again with a nonce and answered the same way.
 */
@Injectable()
export class TokenStatusCache implements OnModuleDestroy {
  private readonly entries = new Map<string, Entry>();
  /** Bumped by every notification, reconnect and loss: a read that saw it change is not kept. */
  private generation = 0;
  private readonly listener: PgListener;
  private listening = false;
  private started = false;
  /** Answers seen per revoked token, and the revocations waiting for them. */
  private readonly acks = new Map<string, number>();
  private readonly waiting = new Map<string, { need: number; done: () => void }[]>();
  private readonly log = rootLogger().child({ component: 'token-status' });
  private readonly changeHooks: ((tenantId: string, jti?: string) => void)[] = [];

  constructor(
    private readonly db: Database,
    private readonly repo: AuthRepository,
  ) {
    this.listener = new PgListener({
      url: db.urls.system,
      applicationName: LISTENER_NAME,
      channels: [REVOKED_CHANNEL, TENANT_CHANNEL, ACK_CHANNEL],
      onNotification: (channel, payload) => this.notified(channel, payload),
      // Notifications sent before LISTEN took effect are not ours: start from an empty cache.
      onConnected: () => {
        this.entries.clear();
        this.generation++;
        this.listening = true;
      },
      onLost: () => this.lost(),
      log: this.log,
    });
  }

  /**
   * Calls `hook` with each revocation (tenant and jti) and each tenant status change (tenant
   * alone) heard, after the cache dropped what it concerns: holders of long-lived connections
   * check their tokens again.
   */
  onChange(hook: (tenantId: string, jti?: string) => void): void {
    this.changeHooks.push(hook);
  }

  /**
   * Why a tenant's token accepted earlier no longer holds for a call still under way (a channel, a
   * long-poll): revoked or unknown (401 TOKEN_REVOKED), past its expiry `exp` (seconds; 401
   * TOKEN_EXPIRED), its tenant disabled (403 TENANT_DISABLED); null while it holds.
   */
  async refusal(tenantId: string, jti: string, exp: number): Promise<DomainError | null> {
    const token = await this.status(tenantId, jti);
    if (!token || token.revoked) return unauthorized('token revoked', 'TOKEN_REVOKED');
    if (exp * 1000 <= Date.now()) return unauthorized('token expired', 'TOKEN_EXPIRED');
    if (!token.tenantActive) return forbidden('tenant is disabled', 'TENANT_DISABLED');
    return null;
  }

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
   * waits (bounded) until every listening connection on the database has answered the
   * revocation's notification, i.e. until every replica has dropped the token.
   */
  async revoked(tenantId: string, jti: string): Promise<void> {
    const key = `${tenantId} ${jti}`;
    this.forget(key);
    this.changed(tenantId, jti);
    if (this.listening) await this.answered(key, async () => undefined);
  }

  /**
   * Called by the process that changed a tenant's status, after the commit: forgets the tenant's
   * tokens here, announces the change once more with a nonce, and waits (bounded) until every
   * listening connection has answered it (each has then dropped the tenant's tokens).
   */
  async tenantChanged(tenantId: string): Promise<void> {
    this.dropTenant(tenantId);
    this.changed(tenantId);
    if (!this.listening) return;
    const key = `${tenantId} ${randomUUID()}`;
    await this.answered(key, () => this.repo.notify(this.db.system, TENANT_CHANNEL, key));
  }

  /** Sends (after registering the wait) and waits until every listener answered `key`, at most ACK_WAIT_MS. */
  private answered(key: string, send: () => Promise<void>): Promise<void> {
    return new Promise<void>((resolve) => {
      const timer = setTimeout(done, ACK_WAIT_MS);
      timer.unref();
      const waiter = { need: Number.POSITIVE_INFINITY, done };
      this.waiting.set(key, [...(this.waiting.get(key) ?? []), waiter]);
      function done() {
        clearTimeout(timer);
        resolve();
      }
      const settle = () => {
        if ((this.acks.get(key) ?? 0) < waiter.need) return;
        const rest = (this.waiting.get(key) ?? []).filter((w) => w !== waiter);
        if (rest.length > 0) this.waiting.set(key, rest);
        else this.waiting.delete(key);
        done();
      };
      send()
        .then(() => this.repo.countListeners(this.db.system, LISTENER_NAME))
        .then(
          (n) => {
            waiter.need = n;
            settle();
          },
          () => done(),
        );
    });
  }

  async onModuleDestroy(): Promise<void> {
    await this.listener.stop();
    this.lost();
  }

  private start(): void {
    this.started = true;
    void this.listener.start();
  }

  /** The listening connection is gone: nothing cached can be trusted any more. */
  private lost(): void {
    this.listening = false;
    this.entries.clear();
    this.generation++;
    for (const list of this.waiting.values()) for (const w of list) w.done();
    this.waiting.clear();
  }

  private notified(channel: string, payload: string): void {
    if (channel === REVOKED_CHANNEL) {
      const [tenantId, jti] = payload.split(' ');
      if (!tenantId || !jti) return;
      this.forget(`${tenantId} ${jti}`);
      this.changed(tenantId, jti);
      // Dropped: tell the revoker (and everyone else listening).
      void this.listener.query('select pg_notify($1, $2)', [ACK_CHANNEL, payload]).catch(() => undefined);
    } else if (channel === ACK_CHANNEL) {
      if (this.acks.size >= MAX_ACKS) this.acks.delete(this.acks.keys().next().value!);
      const n = (this.acks.get(payload) ?? 0) + 1;
      this.acks.set(payload, n);
      const list = this.waiting.get(payload);
      if (!list) return;
      const rest = list.filter((w) => {
        if (n < w.need) return true;
        w.done();
        return false;
      });
      if (rest.length > 0) this.waiting.set(payload, rest);
      else this.waiting.delete(payload);
    } else if (channel === TENANT_CHANNEL) {
      const [tenantId, nonce] = payload.split(' ');
      if (!tenantId) return;
      this.dropTenant(tenantId);
      this.changed(tenantId);
      if (nonce) void this.listener.query('select pg_notify($1, $2)', [ACK_CHANNEL, payload]).catch(() => undefined);
    }
  }

  private changed(tenantId: string, jti?: string): void {
    for (const hook of this.changeHooks) {
      try {
        hook(tenantId, jti);
      } catch (e) {
        this.log.warn({ err: e }, 'a token change hook failed');
      }
    }
  }

  private dropTenant(tenantId: string): void {
    this.generation++;
    const prefix = `${tenantId} `;
    for (const k of this.entries.keys()) if (k.startsWith(prefix)) this.entries.delete(k);
  }

  private forget(key: string): void {
    this.generation++;
    this.entries.delete(key);
  }
}
