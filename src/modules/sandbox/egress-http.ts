import http from 'node:http';
import https from 'node:https';
import net from 'node:net';
import { checkEgress, EgressError, pinnedLookup, type EgressPolicy } from './egress';

export interface EgressRequest {
  method: string;
  url: string;
  headers: Record<string, string>;
  body?: Buffer | string;
  /** The step's egress list; every hop (redirects included) is checked against it. */
  egress: readonly string[];
  signal: AbortSignal;
  /** Wall time for the whole exchange, redirects included. */
  timeoutMs: number;
  maxResponseBytes: number;
  /** Redirects followed before giving up (0 returns the 3xx response as is). */
  maxRedirects?: number;
  /** The operator's rules (which private ranges a literal may reach); strict when absent. */
  policy?: EgressPolicy;
}

export interface EgressResponse {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: Buffer;
  /** The URL that answered (after redirects). */
  url: string;
}

export type RequestErrorCode =
  | 'INVALID_REQUEST'
  | 'EGRESS_DENIED'
  | 'TIMEOUT'
  | 'ABORTED'
  | 'NETWORK_ERROR'
  | 'RESPONSE_TOO_LARGE'
  | 'TOO_MANY_REDIRECTS';

export class RequestError extends Error {
  constructor(
    readonly code: RequestErrorCode,
    message: string,
    readonly retryable: boolean,
  ) {
    super(message);
    this.name = 'RequestError';
  }
}

const REDIRECTS = new Set([301, 302, 303, 307, 308]);
const CREDENTIAL_HEADERS = ['authorization', 'cookie', 'proxy-authorization'];

/**
 * One HTTP exchange under the egress policy: each hop's host is checked and its resolved address
 * pinned for the connection; redirects are followed hop by hop (default at most 5), dropping
 * credentials when the origin changes. The response body is read up to `maxResponseBytes`.
 */
export async function egressRequest(req: EgressRequest): Promise<EgressResponse> {
  const timeout = AbortSignal.timeout(Math.max(1, req.timeoutMs));
  const signal = AbortSignal.any([req.signal, timeout]);
  const maxRedirects = req.maxRedirects ?? 5;
  let url = req.url;
  let method = req.method.toUpperCase();
  let body = req.body;
  // No prototype: a header named `__proto__` is kept like any other.
  const headers = Object.create(null) as Record<string, string>;
  for (const [k, v] of Object.entries(req.headers)) headers[k.toLowerCase()] = v;

  const failure = (e: unknown): RequestError => {
    if (e instanceof RequestError) return e;
    if (e instanceof EgressError) return new RequestError('EGRESS_DENIED', e.message, false);
    if (req.signal.aborted) return new RequestError('ABORTED', 'the step was aborted', false);
    if (timeout.aborted) return new RequestError('TIMEOUT', `no complete response within ${req.timeoutMs} ms`, true);
    const err = e as NodeJS.ErrnoException;
    // Node refuses malformed requests before sending anything (bad header names or values, bad method).
    if (typeof err.code === 'string' && /^ERR_(INVALID|HTTP_INVALID|UNESCAPED)/.test(err.code)) {
      return new RequestError('INVALID_REQUEST', `${err.code}: ${err.message}`, false);
    }
    return new RequestError('NETWORK_ERROR', `${err.code ?? 'error'}: ${err.message}`, true);
  };

  for (let hop = 0; ; hop++) {
    let res: EgressResponse;
    try {
      if (signal.aborted) throw signal.reason;
      const target = await checkEgress(url, req.egress, req.policy);
      res = await exchange(
        target.url,
        target.address,
        target.family,
        method,
        headers,
        body,
        signal,
        req.maxResponseBytes,
      );
    } catch (e) {
      throw failure(e);
    }
    const location = res.headers.location;
    if (!REDIRECTS.has(res.status) || !location || maxRedirects === 0) return res;
    if (hop >= maxRedirects) throw new RequestError('TOO_MANY_REDIRECTS', `more than ${maxRedirects} redirects`, false);
    let next: URL;
    try {
      next = new URL(location, url);
    } catch {
      throw new RequestError('NETWORK_ERROR', `invalid redirect location ${location}`, false);
    }
    if (next.origin !== new URL(url).origin) for (const h of CREDENTIAL_HEADERS) delete headers[h];
    if (res.status === 303 || ((res.status === 301 || res.status === 302) && method === 'POST')) {
      method = method === 'HEAD' ? 'HEAD' : 'GET';
      body = undefined;
      delete headers['content-type'];
    }
    url = next.toString();
  }
}

function exchange(
  url: URL,
  address: string,
  family: 4 | 6,
  method: string,
  headers: Record<string, string>,
  body: Buffer | string | undefined,
  signal: AbortSignal,
  maxBytes: number,
): Promise<EgressResponse> {
  return new Promise((resolve, reject) => {
    const mod = url.protocol === 'https:' ? https : http;
    const host = url.hostname.startsWith('[') ? url.hostname.slice(1, -1) : url.hostname;
    const payload = body === undefined ? undefined : Buffer.isBuffer(body) ? body : Buffer.from(body, 'utf8');
    const h: Record<string, string> = { ...headers };
    delete h['content-length'];
    delete h.host;
    if (payload) h['content-length'] = String(payload.length);
    const request = mod.request(
      {
        method,
        host,
        port: url.port || undefined,
        path: `${url.pathname}${url.search}`,
        headers: h,
        lookup: pinnedLookup({ address, family }),
        servername: net.isIP(host) ? undefined : host,
        agent: false,
        signal,
      },
      (res) => {
        const declared = Number(res.headers['content-length'] ?? NaN);
        if (declared > maxBytes) {
          reject(
            new RequestError(
              'RESPONSE_TOO_LARGE',
              `response of ${declared} bytes exceeds the limit of ${maxBytes}`,
              false,
            ),
          );
          res.destroy();
          return;
        }
        const chunks: Buffer[] = [];
        let size = 0;
        res.on('data', (c: Buffer) => {
          size += c.length;
          if (size > maxBytes) {
            reject(new RequestError('RESPONSE_TOO_LARGE', `response exceeds the limit of ${maxBytes} bytes`, false));
            res.destroy();
            return;
          }
          chunks.push(c);
        });
        res.on('end', () =>
          resolve({
            status: res.statusCode ?? 0,
            headers: res.headers,
            body: Buffer.concat(chunks),
            url: url.toString(),
          }),
        );
        res.on('error', reject);
        res.on('aborted', () => reject(new Error('response aborted')));
      },
    );
    request.on('error', reject);
    request.end(payload);
  });
}
