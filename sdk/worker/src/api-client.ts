import http from 'node:http';
import https from 'node:https';
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
  /** Connections kept open between calls (an idle one does not keep the process alive). */
  private readonly agents = {
    http: new http.Agent({ keepAlive: true }),
    https: new https.Agent({ keepAlive: true }),
  };

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

  private once<T>(base: string, method: string, path: string, opts: CallOptions): Promise<ApiAnswer<T>> {
    const url = new URL(`${base}${path}`);
    const secure = url.protocol === 'https:';
    const headers = this.headers;
    let body: string | undefined;
    if (opts.body !== undefined) {
      body = JSON.stringify(opts.body);
      headers['content-type'] = 'application/json';
      headers['content-length'] = String(Buffer.byteLength(body));
    }
    const timeoutMs = opts.timeoutMs ?? this.opts.requestTimeoutMs ?? 30_000;
    const signal = opts.signal;
    return new Promise<ApiAnswer<T>>((resolve, reject) => {
      if (signal?.aborted) {
        reject(signal.reason as Error);
        return;
      }
      const req = (secure ? https : http).request(
        url,
        { method, headers, agent: secure ? this.agents.https : this.agents.http },
        (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('error', fail);
          res.on('end', () => {
            done();
            try {
              resolve(answer<T>(res.statusCode ?? 0, res.statusMessage ?? '', Buffer.concat(chunks).toString('utf8')));
            } catch (e) {
              reject(e instanceof Error ? e : new Error(String(e)));
            }
          });
        },
      );
      const timer = setTimeout(() => req.destroy(new Error(`no answer within ${timeoutMs} ms`)), timeoutMs);
      const abort = () => req.destroy(signal!.reason instanceof Error ? signal!.reason : new Error('aborted'));
      signal?.addEventListener('abort', abort, { once: true });
      function done() {
        clearTimeout(timer);
        signal?.removeEventListener('abort', abort);
      }
      function fail(e: Error) {
        done();
        reject(e);
      }
      req.on('error', fail);
      req.end(body);
    });
  }
}

/** The answer to a call: its body on a 2xx, else an OrdoApiError with the envelope's code. */
function answer<T>(status: number, statusText: string, text: string): ApiAnswer<T> {
  let parsed: unknown;
  try {
    parsed = text ? JSON.parse(text) : undefined;
  } catch {
    parsed = undefined;
  }
  if (status >= 200 && status < 300) return { status, body: parsed as T };
  const env = (parsed as { error?: { code?: unknown; message?: unknown; traceId?: unknown } } | undefined)?.error;
  throw new OrdoApiError(
    status,
    typeof env?.code === 'string' ? env.code : `HTTP_${status}`,
    typeof env?.message === 'string' ? env.message : text.slice(0, 200) || statusText,
    typeof env?.traceId === 'string' ? env.traceId : undefined,
  );
}
