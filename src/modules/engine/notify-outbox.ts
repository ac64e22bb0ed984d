/** A notification: channel and payload, as the engine functions return them (rows of kind `n`). */
export type Notification = [channel: string, payload: string];

/** The live stream's channel (`<tenant> <newest stream id>`). */
export const STREAM_CHANNEL = 'ordo_run_event';

/**
 * How long a live-stream notification may wait for others to go with it. Every NOTIFY wakes each
 * listening session of the database (workers, stream feeds, other replicas) and costs a statement;
 * one per hop would put ten on the path between the steps of a 10-step chain.
 */
export const STREAM_NOTIFY_MS = 20;

/**
 * The notifications of committed engine statements, sent after the commit one statement at a time
 * (what commits meanwhile goes in the next one). Wake-ups (`ordo_ready`), run ends and cancels go at
 * once; live-stream notifications alone wait up to `delayMs`, one per tenant (the newest event
 * id is enough: a feed reads everything up to it), so that the hops of a run share one.
 */
export class NotifyOutbox {
  /** Replaced, not cleared, at each send: a cleared Map links its old table to the new one (see SlotTable). */
  private pending = new Map<string, Notification>();
  /** `pending` holds a notification that goes at once. */
  private urgent = false;
  private timer: NodeJS.Timeout | null = null;
  private sending = false;
  private sent: Promise<void> = Promise.resolve();
  private closing = false;

  constructor(
    private readonly send: (batch: Notification[]) => Promise<void>,
    private readonly onError: (e: unknown) => void,
    private readonly delayMs = STREAM_NOTIFY_MS,
  ) {}

  add(notifications: Iterable<Notification>): void {
    for (const n of notifications) {
      const [channel, payload] = n;
      if (channel === STREAM_CHANNEL) this.pending.set(`${channel} ${payload.split(' ')[0]}`, n);
      else {
        this.pending.set(`${channel} ${payload}`, n);
        this.urgent = true;
      }
    }
    this.pump();
  }

  /** Sends what waits at once, and from now on everything as it comes; resolves once it is sent. */
  async close(): Promise<void> {
    this.closing = true;
    for (let i = 0; i < 3 && (this.sending || this.pending.size > 0); i++) {
      this.pump();
      await this.sent;
    }
  }

  private pump(): void {
    if (this.sending || this.pending.size === 0) return;
    if (this.urgent || this.closing || this.delayMs <= 0) this.flush();
    else this.timer ??= setTimeout(() => this.flush(), this.delayMs).unref();
  }

  private flush(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    if (this.sending || this.pending.size === 0) return;
    this.sending = true;
    const batch = [...this.pending.values()];
    this.pending = new Map();
    this.urgent = false;
    this.sent = this.send(batch)
      .catch((e: unknown) => this.onError(e))
      .finally(() => {
        this.sending = false;
        this.pump();
      });
  }
}
