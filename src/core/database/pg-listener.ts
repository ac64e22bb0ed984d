import pg from 'pg';

export interface PgListenerOptions {
  url: string;
  /** The connection's application_name (what pg_stat_activity shows). */
  applicationName: string;
  channels: readonly string[];
  onNotification(channel: string, payload: string): void;
  /**
   * After each (re)connect, once LISTEN took effect. Notifications sent while no connection listened
   * were lost: a caller that keeps state from them resyncs here.
   */
  onConnected?(): void;
  /** The connection was lost (it is closed, and a new one follows after a backoff). */
  onLost?(err?: unknown): void;
  /**
   * Runs on a new connection before LISTEN: false gives that connection up, and `start` answers
   * false with no retry (for a listener that must hold a lock first; its caller tries again).
   */
  beforeListen?(client: pg.Client): Promise<boolean>;
  log: { warn(obj: object, msg: string): void };
}

const FIRST_DELAY_MS = 250;
const MAX_DELAY_MS = 5_000;

/**
 * A LISTEN connection that survives drops: a lost connection (an error, its end, a failed connect
 * or LISTEN) is closed once, whatever mix of events it emits, and a new one is made after a backoff
 * (250 ms doubling to 5 s, back to 250 ms once connected), so terminated connections never pile up.
 */
export class PgListener {
  private client: pg.Client | undefined;
  private stopped = true;
  private retry: NodeJS.Timeout | undefined;
  private delay = FIRST_DELAY_MS;

  constructor(private readonly o: PgListenerOptions) {}

  /** Connects and listens; resolves once it listens or the first attempt failed (it keeps trying). */
  async start(): Promise<boolean> {
    this.stopped = false;
    return this.connect();
  }

  get connected(): boolean {
    return this.client !== undefined;
  }

  /** A statement on the listening connection (none while it is lost). */
  async query(text: string, values: unknown[] = []): Promise<void> {
    await this.client?.query(text, values);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.retry) clearTimeout(this.retry);
    this.retry = undefined;
    const c = this.client;
    this.client = undefined;
    if (c) await quietEnd(c);
  }

  private async connect(): Promise<boolean> {
    if (this.stopped) return false;
    const c = new pg.Client({
      connectionString: this.o.url,
      application_name: this.o.applicationName,
      keepAlive: true,
    });
    let lost = false;
    const drop = (e?: unknown) => {
      if (lost) return;
      lost = true;
      this.drop(c, e);
    };
    c.on('error', drop);
    c.on('end', () => drop(new Error('connection ended')));
    c.on('notification', (n) => this.o.onNotification(n.channel, n.payload ?? ''));
    try {
      await c.connect();
      if (this.o.beforeListen && !(await this.o.beforeListen(c))) {
        lost = true;
        await quietEnd(c);
        return false;
      }
      await c.query(this.o.channels.map((ch) => `listen ${pg.escapeIdentifier(ch)}`).join('; '));
    } catch (e) {
      drop(e);
      return false;
    }
    if (this.stopped || lost) {
      if (!lost) await quietEnd(c);
      return false;
    }
    this.client = c;
    this.delay = FIRST_DELAY_MS;
    this.o.onConnected?.();
    return true;
  }

  private drop(c: pg.Client, e?: unknown): void {
    const wasListening = this.client === c;
    if (wasListening) this.client = undefined;
    void quietEnd(c);
    if (e !== undefined || wasListening) {
      this.o.log.warn({ err: e instanceof Error ? e.message : e, retryInMs: this.delay }, 'listening connection lost');
      this.o.onLost?.(e);
    }
    if (this.stopped || this.retry) return;
    this.retry = setTimeout(() => {
      this.retry = undefined;
      void this.connect();
    }, this.delay);
    this.retry.unref();
    this.delay = Math.min(this.delay * 2, MAX_DELAY_MS);
  }
}

async function quietEnd(c: pg.Client): Promise<void> {
  c.removeAllListeners();
  c.on('error', () => undefined);
  await c.end().catch(() => undefined);
}
