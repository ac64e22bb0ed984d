import createFetchClient, { type Client } from 'openapi-fetch';
import type { components, operations, paths } from './api.generated';
import { retryAfterSeconds, toOrdoApiError } from './errors';

export type { components, operations, paths } from './api.generated';
export { OrdoApiError, retryAfterSeconds, toOrdoApiError } from './errors';

/** The API's named schemas: `Schemas['Run']`, `Schemas['DagVersion']`, … */
export type Schemas = components['schemas'];

/** An operation whose X-Tenant-Id header the client supplies: the header becomes optional. */
type TenantHeaderSupplied<Op> = Op extends { parameters: { header: infer H } }
  ? Omit<Op, 'parameters'> & {
      parameters: Omit<Op['parameters'], 'header'> & {
        header?: Omit<H, 'X-Tenant-Id'> & { 'X-Tenant-Id'?: string };
      };
    }
  : Op;

/** The API's paths as this client takes them (X-Tenant-Id optional everywhere). */
export type OrdoPaths = { [P in keyof paths]: { [M in keyof paths[P]]: TenantHeaderSupplied<paths[P][M]> } };

/** Every operation's id, for readers that look routes up by `operationId`. */
export type OperationId = keyof operations;

export interface OrdoClientOptions {
  /**
   * The server's address, e.g. `http://127.0.0.1:8080` (routes carry their `/api/v1` prefix), or
   * several api replicas' addresses: a request that cannot reach one (connection refused, DNS) is
   * sent to the next, and the one that answered is tried first from then on.
   */
  baseUrl: string | string[];
  /** The bearer token sent on every request. */
  token?: string;
  /**
   * The tenant sent as X-Tenant-Id. By default the `tid` claim of the token (read, not verified:
   * the server verifies it); a token without one (a platform token) sends no tenant header.
   */
  tenantId?: string;
  /**
   * How many times an answer 429 or 503 is retried, after its Retry-After (else a doubling delay
   * from 1 s). Default 0. Ordo writes nothing when it answers 429, so a retry is safe; POSTs may
   * carry an Idempotency-Key to make any retry safe.
   */
  retries?: number;
  /** The longest wait before a retry, in ms (default 30 000): a longer Retry-After is not waited for. */
  maxRetryDelayMs?: number;
  /** The fetch to use (default: the global fetch). */
  fetch?: (request: Request) => Promise<Response>;
}

export interface OrdoClient {
  /**
   * The typed client (openapi-fetch): `api.GET('/api/v1/runs/{runId}', { params: { path: { runId } } })`
   * resolves to `{ data }` or `{ error, response }`; wrap a call in `unwrap` to get the data or an
   * OrdoApiError.
   */
  readonly api: Client<OrdoPaths>;
  /** The tenant sent as X-Tenant-Id, if any. */
  readonly tenantId: string | undefined;
  /** The bearer token, for connections the client does not make itself (the WebSocket stream). */
  readonly token: string | undefined;
  /** The addresses given, in order. */
  readonly baseUrls: readonly string[];
  /** The address requests go to first: the one that answered last. */
  readonly baseUrl: string;
}

/** A call's result as openapi-fetch gives it. */
interface CallResult<D> {
  data?: D;
  error?: unknown;
  response: Response;
}

/** The data of a successful call; a failed one throws its OrdoApiError (code, message, status, traceId, details). */
export async function unwrap<D>(call: Promise<CallResult<D>>): Promise<D> {
  const r = await call;
  if (r.response.ok) return r.data as D;
  throw toOrdoApiError(r.response.status, r.error, r.response.headers);
}

/** The `tid` claim of a JWT, read without verifying it; undefined when there is none. */
export function tenantOfToken(token: string | undefined): string | undefined {
  const payload = token?.split('.')[1];
  if (!payload) return undefined;
  try {
    const b64 = payload.replace(/-/g, '+').replace(/_/g, '/');
    const json = JSON.parse(atob(b64 + '='.repeat((4 - (b64.length % 4)) % 4))) as { tid?: unknown };
    return typeof json.tid === 'string' ? json.tid : undefined;
  } catch {
    return undefined;
  }
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** A client of one Ordo deployment, for one token. */
export function createOrdoClient(options: OrdoClientOptions): OrdoClient {
  const baseUrls = (Array.isArray(options.baseUrl) ? options.baseUrl : [options.baseUrl]).map((u) =>
    u.replace(/\/+$/, ''),
  );
  if (baseUrls.length === 0) throw new Error('createOrdoClient: baseUrl names no address');
  const tenantId = options.tenantId ?? tenantOfToken(options.token);
  const retries = options.retries ?? 0;
  const maxDelay = options.maxRetryDelayMs ?? 30_000;
  const fetchFn = options.fetch ?? ((r: Request) => fetch(r));
  let preferred = 0;

  /** Sends to the preferred address, then to the others when it cannot be reached. */
  const sendOnce = async (request: Request, body: ArrayBuffer | undefined): Promise<Response> => {
    const path = request.url.slice(baseUrls[0].length);
    let lastError: unknown;
    for (let i = 0; i < baseUrls.length; i++) {
      const at = (preferred + i) % baseUrls.length;
      try {
        const response = await fetchFn(
          new Request(baseUrls[at] + path, {
            method: request.method,
            headers: request.headers,
            body,
            signal: request.signal,
            redirect: request.redirect,
          }),
        );
        preferred = at;
        return response;
      } catch (e) {
        // An aborted request is the caller's decision, not an unreachable address.
        if (request.signal.aborted) throw e;
        lastError = e;
      }
    }
    throw lastError;
  };

  const send = async (request: Request): Promise<Response> => {
    // The body is read once so that another address, or a retry, can send it again.
    const body = request.body === null ? undefined : await request.arrayBuffer();
    for (let attempt = 0; ; attempt++) {
      const response = await sendOnce(request, body);
      if ((response.status !== 429 && response.status !== 503) || attempt >= retries) return response;
      const asked = retryAfterSeconds(response.headers.get('retry-after'));
      const delay = asked !== undefined ? asked * 1000 : 1000 * 2 ** attempt;
      if (delay > maxDelay) return response;
      await response.body?.cancel();
      await sleep(delay);
    }
  };

  const api = createFetchClient<OrdoPaths>({ baseUrl: baseUrls[0], fetch: send });
  api.use({
    onRequest({ request }) {
      if (options.token && !request.headers.has('authorization')) {
        request.headers.set('authorization', `Bearer ${options.token}`);
      }
      if (tenantId && !request.headers.has('x-tenant-id')) request.headers.set('x-tenant-id', tenantId);
      return request;
    },
  });
  return {
    api,
    tenantId,
    token: options.token,
    baseUrls,
    get baseUrl() {
      return baseUrls[preferred];
    },
  };
}
