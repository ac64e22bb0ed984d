// One WebSocket to /api/v1/stream per page, authenticated by the session cookie on the upgrade.
// Every event carries a cursor, totally ordered per tenant; the last one seen is kept, and a
// reconnect asks for `?since=<cursor>`, so the server delivers exactly what was missed before the
// live events: no gap, no duplicate. Subscriptions are sent again after each `ready`.

export interface StreamEvent {
  cursor: string;
  event: 'run.started' | 'run.updated' | 'run.completed' | 'run.failed' | 'run.cancelled' | 'step.updated';
  eventType: string;
  dagId: string;
  runId: string;
  seq: number;
  stepId: string | null;
  attempt: number | null;
  status: string;
  timestamp: string;
}

export interface StreamFilter {
  dagId?: string;
  runId?: string;
  status?: string[];
}

export type StreamState = 'connecting' | 'live' | 'offline';

interface Options {
  filter: StreamFilter;
  onEvent: (e: StreamEvent) => void;
  onState: (s: StreamState) => void;
  /**
   * Called each time the subscription becomes active: the page reads again what may have committed
   * between its own read and the stream's start position.
   */
  onSubscribed?: () => void;
}

const SUBSCRIPTION = 'console';
const MAX_BACKOFF_MS = 10_000;

export class LiveStream {
  private ws: WebSocket | null = null;
  private cursor: string | null = null;
  private closed = false;
  private failures = 0;
  private timer: ReturnType<typeof setTimeout> | undefined;
  private readies = 0;

  constructor(private readonly opts: Options) {
    this.connect();
    window.addEventListener('online', this.retryNow);
  }

  close(): void {
    this.closed = true;
    clearTimeout(this.timer);
    window.removeEventListener('online', this.retryNow);
    this.ws?.close(1000);
    this.ws = null;
  }

  private readonly retryNow = (): void => {
    if (this.closed || this.ws) return;
    clearTimeout(this.timer);
    this.connect();
  };

  private connect(): void {
    this.opts.onState(this.readies === 0 ? 'connecting' : 'offline');
    const url = new URL('/api/v1/stream', location.href);
    url.protocol = location.protocol === 'https:' ? 'wss:' : 'ws:';
    if (this.cursor) url.searchParams.set('since', this.cursor);
    const ws = new WebSocket(url);
    this.ws = ws;
    ws.onmessage = (m: MessageEvent<string>) => this.handle(m.data);
    ws.onclose = () => {
      if (this.ws !== ws) return;
      this.ws = null;
      if (this.closed) return;
      this.opts.onState('offline');
      // Backs off to at most 10 s; an `online` event from the browser retries at once.
      const delay = Math.min(MAX_BACKOFF_MS, 250 * 2 ** this.failures++);
      this.timer = setTimeout(() => this.connect(), delay);
    };
  }

  private handle(data: string): void {
    let msg: { type?: string; cursor?: string } & Partial<StreamEvent>;
    try {
      msg = JSON.parse(data) as typeof msg;
    } catch {
      return;
    }
    switch (msg.type) {
      case 'ready':
        // Without a cursor of our own, the server's start position is where the page's reads began.
        this.cursor ??= msg.cursor ?? null;
        this.ws?.send(JSON.stringify({ type: 'subscribe', id: SUBSCRIPTION, filter: this.opts.filter }));
        return;
      case 'subscribed':
        this.failures = 0;
        this.readies++;
        this.opts.onState('live');
        this.opts.onSubscribed?.();
        return;
      case 'event':
        if (msg.cursor) this.cursor = msg.cursor;
        this.opts.onEvent(msg as StreamEvent);
        return;
      default:
        return;
    }
  }
}
