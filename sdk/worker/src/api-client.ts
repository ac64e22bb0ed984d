import { backoffDelay, DEFAULT_BACKOFF, sleep, type BackoffOptions } from './backoff';
import { OrdoApiError, OrdoUnreachableError } from './errors';
import { SDK_VERSION } from './version';

export interface ApiClientOptions {
  /** Base URLs of Ordo instances, tried in order; a failing one hands over to the next. */
  urls: string[];
  token: string;
  tenantId: string;
  backoff?: BackoffOptions;
  /** Time limit of one HTTP request unless the call sets its own (default 30 s). */
  requestTimeoutMs?: number;
  random?: () => number;
}

export interface CallOptions {
  body?: unknown;
  /** Time limit of each try. */
  timeoutMs?: number;
  /** Aborts the call, including its waits between tries; the call then rejects with the signal's reason. */
  signal?: AbortSignal;
  /** Tries in all (default: until the call succeeds, is answered with an error that is not retryable, or aborts). */
  tries?: number;
  /** Told of each failed try before the wait that follows it. */
  onRetry?: (error: Error, url: string, delayMs: number) => void;
}

export interface ApiAnswer<T> {
  status: number;
  body: T | undefined;
}

/**
 * HTTP to Ordo with the worker's credentials. A try that fails without an answer (refused, reset,
 * timed out) or with a retryable answer (429, 5xx) moves to the next URL after an exponential
 * backoff with jitter; the URL that answers stays current for the calls that follow.
 */
export class ApiClient {
  private current = 0;
  private readonly urls: string[];

  constructor(private readonly opts: ApiClientOptions) {
    if (opts.urls.length === 0) throw new Error('at least one Ordo URL is required');
    this.urls = opts.urls.map((u) => u.replace(/\/+$/, ''));
  }

  /** The base URL calls go to now. */
  get baseUrl(): string {
    return this.urls[this.current];
  }

  /** Moves to the next URL (after a failure of the current one outside a call, e.g. of the channel). */
  failover(): void {
    this.current = (this.current + 1) % this.urls.length;
  }

  get headers(): Record<string, string> {
    return {
      authorization: `Bearer ${this.opts.token}`,
      'x-tenant-id': this.opts.tenantId,
      'user-agent': `ordo-worker-sdk/${SDK_VERSION}`,
    };
  }

  async call<T>(method: string, path: string, opts: CallOptions = {}): Promise<ApiAnswer<T>> {
    const tries = opts.tries ?? Infinity;
    for (let n = 0; ; n++) {
      const url = this.baseUrl;
      let failure: Error;
      try {
        return await this.once<T>(url, method, path, opts);
      } catch (e) {
        if (opts.signal?.aborted) throw opts.signal.reason;
        if (e instanceof OrdoApiError && !e.retryable) throw e;
        failure = e as Error;
      }
      if (n + 1 >= tries) {
        if (failure instanceof OrdoApiError) throw failure;
        throw new OrdoUnreachableError(`${method} ${path}: ${failure.message}`, failure);
      }
      // The URL may have moved already (another call failed over meanwhile): move only from the one that failed.
      if (this.baseUrl === url) this.failover();
      const delay = backoffDelay(n, this.opts.backoff ?? DEFAULT_BACKOFF, this.opts.random);
      opts.onRetry?.(failure, url, delay);
      await sleep(delay, opts.signal);
      if (opts.signal?.aborted) throw opts.signal.reason;
    }
  }

  private async once<T>(base: string, method: string, path: string, opts: CallOptions): Promise<ApiAnswer<T>> {
    const timeout = AbortSignal.timeout(opts.timeoutMs ?? this.opts.requestTimeoutMs ?? 30_000);
    const signal = opts.signal ? AbortSignal.any([opts.signal, timeout]) : timeout;
    const headers = this.headers;
    let body: string | undefined;
    if (opts.body !== undefined) {
      body = JSON.stringify(opts.body);
      headers['content-type'] = 'application/json';
    }
    const res = await fetch(`${base}${path}`, { method, headers, body, signal });
    const text = await res.text();
    let parsed: unknown;
    try {
      parsed = text ? JSON.parse(text) : undefined;
    } catch {
      parsed = undefined;
    }
    if (res.ok) return { status: res.status, body: parsed as T };
    const env = (parsed as { error?: { code?: unknown; message?: unknown; traceId?: unknown } } | undefined)?.error;
    throw new OrdoApiError(
      res.status,
      typeof env?.code === 'string' ? env.code : `HTTP_${res.status}`,
      typeof env?.message === 'string' ? env.message : text.slice(0, 200) || res.statusText,
      typeof env?.traceId === 'string' ? env.traceId : undefined,
    );
  }
}
