import type { ApiClient } from './api-client';
import { backoffDelay, DEFAULT_BACKOFF, sleep, type BackoffOptions } from './backoff';
import { Channel, ChannelRefused } from './channel';
import { OrdoApiError } from './errors';
import {
  REFUSED_RESULT_CODES,
  type HeartbeatAnswer,
  type JsonObject,
  type ProgressBody,
  type Registration,
  type ResultAnswer,
  type ResultBody,
  type ResultsAnswer,
  type SyncAnswer,
  type Task,
} from './protocol';

export type TransportKind = 'websocket' | 'long-poll';

/** A result waiting to be posted over HTTP. */
interface OutboxEntry {
  task: Task;
  body: ResultBody;
  bytes: number;
  resolve: (answer: ResultAnswer | undefined | Promise<ResultAnswer | undefined>) => void;
}

/** What a session needs from the worker that owns it. */
export interface SessionHost {
  readonly client: ApiClient;
  /** Aborts when the worker stops: result posts outlive the session, not the worker. */
  readonly stopSignal: AbortSignal;
  readonly backoff?: BackoffOptions;
  /** Tries of a result post over HTTP before it is given up. */
  readonly resultTries: number;
  /** Slots free for more tasks now. */
  capacity(): number;
  /** Models loaded now, sent with each heartbeat. */
  loaded(): string[] | undefined;
  onTask(task: Task, session: WorkerSession): void;
  /** The attempts of this session the worker holds: running, or posting their results. */
  holding(session: WorkerSession): string[];
  onCancel(attemptId: string, reason: string): void;
  /** The server no longer knows this registration (offline past its TTL, or WORKER_NOT_FOUND). */
  onLost(session: WorkerSession, why: string): void;
  /** An answer no retry can change (the token was revoked, lacks the worker scope). */
  onFatal(error: Error): void;
  onTransport(kind: TransportKind): void;
  onRefused(task: Task, code: string): void;
  onWarning(error: Error): void;
}

const CHANNEL_OPEN_TIMEOUT_MS = 10_000;
/** Results a post carries at most (the server's limit), and their bytes as JSON at most (one larger goes alone). */
const MAX_RESULTS_A_POST = 100;
const MAX_RESULTS_POST_BYTES = 256 * 1024;
/** The close code of a channel whose worker the server reports offline. */
const CLOSE_OFFLINE = 4409;
/** The most credit the server keeps for a channel (and takes in one `ready`). */
const MAX_CREDIT = 1_000;
const ACK_TIMEOUT_MS = 15_000;
/** Consecutive failures to open the channel before the session pulls by long-poll instead. */
const CHANNEL_FAILURES_BEFORE_FALLBACK = 3;
/** The longest a session on long-poll waits before it tries a channel that failed to open again. */
const MAX_CHANNEL_PROBE_MS = 300_000;

/** Answers that mean the server no longer knows this registration: the worker registers again. */
const GONE_CODES: ReadonlySet<string> = new Set(['WORKER_NOT_FOUND', 'WORKER_OFFLINE']);
const isWorkerGone = (e: unknown) => e instanceof OrdoApiError && GONE_CODES.has(e.code);
const isFatal = (e: unknown) => e instanceof OrdoApiError && (e.status === 401 || e.status === 403);

/**
 * One registration of the worker (one worker id): its heartbeats, the pulling of tasks (over the
 * channel, or by long-poll) and the posting of their results and progress. It ends when the worker
 * leaves or when the server no longer knows the id; the worker then registers again.
 */
export class WorkerSession {
  private readonly ended = new AbortController();
  /** Aborts pulling (long-poll requests, channel credit) when the session drains or ends. */
  private readonly pulling = new AbortController();
  private channel: Channel | undefined;
  /** When the oldest heartbeat sent on the channel since its last heartbeat answer went. */
  private channelHeartbeatUnansweredSince: number | undefined;
  /** Credit granted on the open channel and not yet used by a task. */
  private credit = 0;
  private wakeCapacity: (() => void) | undefined;
  private readonly progressInFlight = new Map<string, ProgressBody | null>();
  /**
   * A pull's answer may have been lost (a long-poll that failed, a channel that closed after it
   * opened): tasks may be delivered to this worker that it never got. The next pull first says
   * what the worker holds (sync), and the server delivers the others again.
   */
  private unsure = false;
  /** Results waiting to be posted over HTTP (see postOutbox), and whether a post of them is under way. */
  private readonly outbox: OutboxEntry[] = [];
  private posting = false;

  constructor(
    readonly registration: Registration,
    private readonly host: SessionHost,
    private transport: TransportKind,
  ) {}

  get workerId(): string {
    return this.registration.workerId;
  }

  get transportKind(): TransportKind {
    return this.transport;
  }

  get isEnded(): boolean {
    return this.ended.signal.aborted;
  }

  private get path(): string {
    return `/api/v1/workers/${encodeURIComponent(this.workerId)}`;
  }

  start(): void {
    void this.heartbeatLoop();
    void (this.transport === 'websocket' ? this.channelLoop() : this.pollLoop());
  }

  /** A slot was freed: grant the channel more credit, or let the long-poll ask for more. */
  capacityChanged(): void {
    this.grantCredit();
    this.wakeCapacity?.();
  }

  /** Tells the server to offer no more tasks and stops pulling; tasks held finish normally. */
  async drain(): Promise<void> {
    this.stopPulling();
    if (this.isEnded) return;
    await this.host.client
      .call('POST', `${this.path}/drain`, { tries: 3, signal: this.ended.signal })
      .catch((e: unknown) => this.host.onWarning(e as Error));
  }

  /** Leaves (DELETE): tasks still held are orphaned and retried elsewhere. Ends the session. */
  async leave(): Promise<void> {
    if (!this.isEnded) {
      await this.host.client.call('DELETE', this.path, { tries: 3 }).catch((e: unknown) => {
        if (!isWorkerGone(e)) this.host.onWarning(e as Error);
      });
    }
    this.end();
  }

  /** Ends the session's loops and closes the channel, without telling the server. */
  end(): void {
    this.stopPulling();
    this.ended.abort();
    this.channel?.close();
    this.channel = undefined;
  }

  /**
   * Posts a task's result (on the channel when open, else over HTTP, retried). Resolves with the
   * server's answer, or undefined when the server refuses it for good (the attempt went elsewhere,
   * was cancelled, or has another result) or it could not be delivered.
   */
  async postResult(task: Task, body: ResultBody): Promise<ResultAnswer | undefined> {
    if (this.channel?.isOpen) {
      try {
        return await this.channel.sendResult(task.attemptId, body, ACK_TIMEOUT_MS);
      } catch (e) {
        if (e instanceof OrdoApiError && REFUSED_RESULT_CODES.has(e.code)) {
          this.host.onRefused(task, e.code);
          return undefined;
        }
        // Not acknowledged on the channel: HTTP gives a definite answer (a repeated result is answered as a duplicate).
      }
    }
    return new Promise((resolve) => {
      this.outbox.push({ task, body, bytes: Buffer.byteLength(JSON.stringify(body)), resolve });
      if (this.outbox.length === 1 && !this.posting) setImmediate(() => void this.postOutbox());
    });
  }

  /**
   * Posts the results waiting over HTTP, several a post (the results route), one post at a time:
   * the results that end while one is under way go together in the next, as the server applies
   * them together.
   */
  private async postOutbox(): Promise<void> {
    if (this.posting) return;
    this.posting = true;
    try {
      while (this.outbox.length > 0) {
        let n = 0;
        let bytes = 0;
        while (
          n < this.outbox.length &&
          n < MAX_RESULTS_A_POST &&
          (n === 0 || bytes + this.outbox[n].bytes <= MAX_RESULTS_POST_BYTES)
        )
          bytes += this.outbox[n++].bytes;
        const batch = this.outbox.splice(0, n);
        if (batch.length === 1) batch[0].resolve(await this.postResultHttp(batch[0].task, batch[0].body, false));
        else await this.postResultsHttp(batch);
      }
    } finally {
      this.posting = false;
    }
  }

  private async postResultsHttp(batch: OutboxEntry[]): Promise<void> {
    let answers: ResultsAnswer['results'];
    try {
      const r = await this.host.client.call<ResultsAnswer>('POST', `${this.path}/tasks/results`, {
        body: { results: batch.map((b) => ({ attemptId: b.task.attemptId, ...b.body })) },
        tries: this.host.resultTries,
        // Not the session's signal: results under way when the server drops the registration still get their answers.
        signal: this.host.stopSignal,
      });
      answers = r.body?.results ?? [];
    } catch (e) {
      // A server without the route, a post over its body limit or one it refuses as a whole (a
      // malformed result among them): each result on its own, so that each gets its own answer.
      if (e instanceof OrdoApiError && [400, 404, 413].includes(e.status) && !isWorkerGone(e)) {
        for (const b of batch) b.resolve(await this.postResultHttp(b.task, b.body, false));
        return;
      }
      for (const b of batch) b.resolve(this.resultFailed(b.task, b.body, e, false));
      return;
    }
    const byAttempt = new Map(answers.map((a) => [a.attemptId, a]));
    for (const b of batch) {
      const a = byAttempt.get(b.task.attemptId);
      if (a === undefined)
        b.resolve(this.resultFailed(b.task, b.body, new Error(`no answer for ${b.task.attemptId}`), false));
      else if ('answer' in a) b.resolve(a.answer);
      else {
        const e = new OrdoApiError(a.refused.status, a.refused.code, a.refused.message);
        b.resolve(this.resultFailed(b.task, b.body, e, false));
      }
    }
  }

  private async postResultHttp(task: Task, body: ResultBody, replacement: boolean): Promise<ResultAnswer | undefined> {
    try {
      const r = await this.host.client.call<ResultAnswer>(
        'POST',
        `${this.path}/tasks/${encodeURIComponent(task.attemptId)}/result`,
        // Not the session's signal: a result under way when the server drops the registration still gets its answer.
        { body, tries: this.host.resultTries, signal: this.host.stopSignal },
      );
      return r.body;
    } catch (e) {
      return this.resultFailed(task, body, e, replacement);
    }
  }

  /** A result the server did not take: dropped, replaced by a failure it takes, or warned of. */
  private async resultFailed(
    task: Task,
    body: ResultBody,
    e: unknown,
    replacement: boolean,
  ): Promise<ResultAnswer | undefined> {
    if (e instanceof OrdoApiError && REFUSED_RESULT_CODES.has(e.code)) {
      this.host.onRefused(task, e.code);
      return undefined;
    }
    if (isWorkerGone(e)) {
      this.lost((e as OrdoApiError).code);
      return undefined;
    }
    if (e instanceof OrdoApiError && (e.status === 413 || e.status === 400) && !replacement) {
      // The result itself is refused: the step fails for good with the reason, instead of waiting for its deadline.
      const code = e.status === 413 ? 'OUTPUTS_TOO_LARGE' : 'RESULT_REJECTED';
      const failed: ResultBody = {
        epoch: body.epoch,
        status: 'failed',
        error: { class: 'permanent', code, message: e.message },
      };
      return this.postResultHttp(task, failed, true);
    }
    this.host.onWarning(e as Error);
    return undefined;
  }

  /** Reports progress, best effort; while one post of a task is under way the latest report waits for it. */
  progress(task: Task, percent?: number, message?: string, data?: JsonObject): void {
    const body: ProgressBody = {
      epoch: task.epoch,
      ...(percent !== undefined ? { percent } : {}),
      ...(message !== undefined ? { message } : {}),
      ...(data !== undefined ? { data } : {}),
    };
    if (this.isEnded) return;
    if (this.channel?.send({ type: 'progress', attemptId: task.attemptId, ...body })) return;
    if (this.progressInFlight.has(task.attemptId)) {
      this.progressInFlight.set(task.attemptId, body);
      return;
    }
    this.progressInFlight.set(task.attemptId, null);
    void this.postProgress(task, body);
  }

  private async postProgress(task: Task, body: ProgressBody): Promise<void> {
    let next: ProgressBody | null = body;
    while (next && !this.isEnded) {
      this.progressInFlight.set(task.attemptId, null);
      await this.host.client
        .call('POST', `${this.path}/tasks/${encodeURIComponent(task.attemptId)}/progress`, {
          body: next,
          tries: 1,
          signal: this.ended.signal,
        })
        .catch(() => undefined);
      next = this.progressInFlight.get(task.attemptId) ?? null;
    }
    this.progressInFlight.delete(task.attemptId);
  }

  private lost(why: string): void {
    if (this.isEnded) return;
    this.end();
    this.host.onLost(this, why);
  }

  private stopPulling(): void {
    this.pulling.abort();
    this.wakeCapacity?.();
  }

  private handleCallError(e: unknown): boolean {
    if (isWorkerGone(e)) {
      this.lost((e as OrdoApiError).code);
      return false;
    }
    if (isFatal(e)) {
      this.end();
      this.host.onFatal(e as Error);
      return false;
    }
    this.host.onWarning(e as Error);
    return true;
  }

  private onHeartbeat(answer: HeartbeatAnswer): void {
    this.channelHeartbeatUnansweredSince = undefined;
    for (const c of answer.cancel ?? []) this.host.onCancel(c.attemptId, c.reason);
    if (answer.status === 'offline') this.lost('offline');
    else if (answer.status === 'draining') this.stopPulling();
  }

  private async heartbeatLoop(): Promise<void> {
    const signal = this.ended.signal;
    for (;;) {
      await sleep(this.registration.heartbeatIntervalMs, signal);
      if (signal.aborted) return;
      const loaded = this.host.loaded();
      const body = loaded !== undefined ? { loaded } : {};
      // On the channel the answer comes back as a heartbeat message. A channel that answered no
      // heartbeat for a TTL is taken for dead (a lost network may leave the socket looking open): it
      // is dropped and opened again, and this heartbeat goes over HTTP.
      const since = this.channelHeartbeatUnansweredSince;
      if (this.channel && since !== undefined && Date.now() - since > this.registration.ttlMs) {
        this.channelHeartbeatUnansweredSince = undefined;
        this.host.onWarning(new Error('the channel answered no heartbeat for a TTL: opening it again'));
        this.channel.terminate();
      } else if (this.channel?.send({ type: 'heartbeat', ...body })) {
        this.channelHeartbeatUnansweredSince ??= Date.now();
        continue;
      }
      try {
        const r = await this.host.client.call<HeartbeatAnswer>('POST', `${this.path}/heartbeat`, {
          body,
          tries: 2,
          // The server answers heartbeats in batches (about once a second): a slow answer is not a lost one.
          timeoutMs: Math.max(5_000, this.registration.ttlMs),
          signal,
        });
        if (r.body) this.onHeartbeat(r.body);
      } catch (e) {
        if (signal.aborted || !this.handleCallError(e)) return;
      }
    }
  }

  private waitForCapacity(): Promise<void> {
    return new Promise((resolve) => {
      this.wakeCapacity = () => {
        this.wakeCapacity = undefined;
        resolve();
      };
    });
  }

  /**
   * Pulls by long-poll; with `probe` (a channel that failed to open, not one the server lacks),
   * tries the channel once more after the first pull that ends past `probe.at`.
   */
  private async pollLoop(probe?: { at: number; n: number }): Promise<void> {
    const signal = this.pulling.signal;
    const waitMs = this.registration.longPollMs;
    let failures = 0;
    while (!signal.aborted) {
      if (probe !== undefined && Date.now() >= probe.at) {
        this.transport = 'websocket';
        return this.channelLoop(probe.n);
      }
      const free = this.host.capacity();
      if (free <= 0) {
        await this.waitForCapacity();
        continue;
      }
      try {
        if (this.unsure) {
          await this.host.client
            .call<SyncAnswer>('POST', `${this.path}/tasks/sync`, {
              body: { holding: this.host.holding(this) },
              signal,
              tries: 1,
            })
            // A server older than the sync has no such route: its tasks wait for their deadline.
            .catch((e: unknown) => {
              if (!(e instanceof OrdoApiError && e.code === 'ROUTE_NOT_FOUND')) throw e;
            });
          this.unsure = false;
        }
        const r = await this.host.client.call<{ tasks: Task[] }>(
          'GET',
          `${this.path}/tasks/next?waitMs=${waitMs}&max=${free}`,
          { timeoutMs: waitMs + 15_000, signal, tries: 1 },
        );
        failures = 0;
        if (r.status === 200) for (const t of r.body?.tasks ?? []) this.host.onTask(t, this);
      } catch (e) {
        if (signal.aborted || !this.handleCallError(e)) return;
        this.unsure = true;
        this.host.client.failover();
        await sleep(backoffDelay(failures++, this.host.backoff ?? DEFAULT_BACKOFF), signal);
      }
    }
  }

  private grantCredit(): void {
    if (!this.channel?.isOpen || this.pulling.signal.aborted) return;
    const want = Math.min(this.host.capacity(), MAX_CREDIT) - this.credit;
    if (want > 0 && this.channel.send({ type: 'ready', credit: want })) this.credit += want;
  }

  /**
   * Opens the channel and takes tasks over it, opening it again when it closes. Three failures in
   * a row to open it (one, for the `probe`-th try after a fallback) fall back to long-poll, which
   * tries the channel again after the longest backoff, doubled at each probe up to 5 minutes: a
   * worker that cannot open it spends at most one open timeout per probe not pulling.
   */
  private async channelLoop(probe = 0): Promise<void> {
    let failures = 0;
    while (!this.ended.signal.aborted) {
      let closed!: () => void;
      const whenClosed = new Promise<void>((resolve) => (closed = resolve));
      let channel: Channel;
      try {
        const url = `${this.host.client.baseUrl.replace(/^http/, 'ws')}${this.path}/channel`;
        channel = await Channel.open(
          url,
          this.host.client.headers,
          {
            onTask: (task) => {
              this.credit = Math.max(0, this.credit - 1);
              this.host.onTask(task, this);
              // An attempt offered again while it runs here took a credit and no slot: asked for again.
              this.grantCredit();
            },
            onCancel: (attemptId, reason) => this.host.onCancel(attemptId, reason),
            onHeartbeat: (answer) => this.onHeartbeat(answer),
            onError: (error) => {
              if (!this.handleCallError(error)) closed();
            },
            onClose: (code) => {
              // The server closes the channel of a worker it reports offline: register again.
              if (code === CLOSE_OFFLINE) this.lost('offline');
              closed();
            },
          },
          CHANNEL_OPEN_TIMEOUT_MS,
        );
      } catch (e) {
        if (this.ended.signal.aborted) return;
        const refused = e instanceof ChannelRefused ? e : undefined;
        if (refused?.code !== undefined && GONE_CODES.has(refused.code)) return this.lost(refused.code);
        if (refused?.status === 401 || refused?.status === 403) {
          this.end();
          return this.host.onFatal(new OrdoApiError(refused.status, refused.code ?? 'FORBIDDEN', refused.message));
        }
        failures++;
        // A server that answers the upgrade with a client error has no channel for us: long-poll instead.
        const noChannel = refused?.status !== undefined && refused.status < 500;
        if (noChannel || failures >= (probe > 0 ? 1 : CHANNEL_FAILURES_BEFORE_FALLBACK)) {
          this.host.onWarning(
            new Error(`WebSocket channel unavailable (${(e as Error).message}); pulling by long-poll`),
          );
          this.transport = 'long-poll';
          this.host.onTransport('long-poll');
          if (noChannel) return this.pollLoop();
          const wait = Math.min((this.host.backoff ?? DEFAULT_BACKOFF).maxMs * 2 ** probe, MAX_CHANNEL_PROBE_MS);
          return this.pollLoop({ at: Date.now() + wait, n: probe + 1 });
        }
        this.host.client.failover();
        await sleep(backoffDelay(failures - 1, this.host.backoff ?? DEFAULT_BACKOFF), this.ended.signal);
        continue;
      }
      if (this.ended.signal.aborted) {
        channel.close();
        return;
      }
      failures = 0;
      probe = 0;
      this.channel = channel;
      this.credit = 0;
      this.channelHeartbeatUnansweredSince = undefined;
      this.host.onTransport('websocket');
      // The server handles a channel's messages in order: the sync is done before any credit is used.
      if (this.unsure) channel.send({ type: 'sync', holding: this.host.holding(this) });
      this.unsure = true;
      this.grantCredit();
      const onEnd = () => closed();
      this.ended.signal.addEventListener('abort', onEnd, { once: true });
      await whenClosed;
      this.ended.signal.removeEventListener('abort', onEnd);
      if (this.channel === channel) this.channel = undefined;
      channel.close();
      // A server that closes each new connection at once is not asked again in a tight loop.
      await sleep(backoffDelay(0, this.host.backoff ?? DEFAULT_BACKOFF), this.ended.signal);
    }
  }
}
