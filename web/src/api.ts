// Every call the console makes to the API goes through this module: same origin, the session cookie
// (HttpOnly, never visible here) for authentication, the CSRF token held in memory on each
// state-changing request, and the API's error envelope turned into an ApiError. Its types are the
// API's schemas as generated from the OpenAPI document (sdk/client, checked in CI).
import type { components, operations } from '../../sdk/client/src/api.generated';
import { createOrdoClient } from '../../sdk/client/src/index';

type Schemas = components['schemas'];

export type Scope = 'orchestrator:read' | 'orchestrator:write' | 'orchestrator:admin' | 'platform:admin';

export type Session = Schemas['ConsoleSession'];

export const RUN_STATES = ['queued', 'running', 'succeeded', 'failed', 'cancelled'] as const;
export type RunStatus = (typeof RUN_STATES)[number];
/** The statuses the runs list filters by. */
export type RunStatusFilter = NonNullable<NonNullable<operations['listRuns']['parameters']['query']>['status']>;

export type StepStatus = Schemas['Step']['status'];
export type Run = Schemas['Run'];
export type Step = Schemas['Step'];
export type RunDetail = Schemas['RunDetail'];
export type Attempt = Schemas['Attempt'];

export interface Page<T> {
  items: T[];
  nextPageToken: string | null;
}

export type DagVersionSummary = Schemas['DagVersionSummary'];
export type DagVersion = Schemas['DagVersion'];
export type DagGraph = Schemas['DagGraph'];

/** A refusal from the API, with the envelope's stable code. */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly traceId?: string,
  ) {
    super(message);
  }
}

let current: Session | null = null;
const signedOutListeners = new Set<() => void>();

/** The signed-in session as the API last described it, or null. */
export function session(): Session | null {
  return current;
}

/** Called when the API answers 401: the session ended (signed out, expired or its token revoked). */
export function onSignedOut(fn: () => void): () => void {
  signedOutListeners.add(fn);
  return () => signedOutListeners.delete(fn);
}

export function canWrite(s: Session | null): boolean {
  return !!s && (s.scopes.includes('orchestrator:write') || s.scopes.includes('orchestrator:admin'));
}

/**
 * The typed client (sdk/client, openapi-fetch over the generated paths) on the console's origin:
 * the session cookie rides along (same origin), and each request carries the session's tenant and,
 * when it changes state, the CSRF token held in memory.
 */
const client = createOrdoClient({
  baseUrl: location.origin,
  fetch: (r) => fetch(r, { credentials: 'same-origin', cache: 'no-store' }),
});
client.api.use({
  onRequest({ request }) {
    request.headers.set('accept', 'application/json');
    if (current?.tenantId) request.headers.set('x-tenant-id', current.tenantId);
    if (request.method !== 'GET' && current) request.headers.set('x-csrf-token', current.csrfToken);
    return request;
  },
});
const http = client.api;

interface Answer<D> {
  data?: D;
  error?: unknown;
  response: Response;
}

/** The data of a call, or its refusal as an ApiError (the envelope's code); a 401 ends the session here. */
async function call<D>(pending: Promise<Answer<D>>): Promise<D> {
  const { data, error, response } = await pending;
  if (response.ok) return data as D;
  const env = (typeof error === 'object' && error !== null ? error : {}) as {
    error?: { code?: string; message?: string; traceId?: string };
  };
  if (response.status === 401 && current && !response.url.endsWith('/api/v1/session')) {
    current = null;
    for (const fn of signedOutListeners) fn();
  }
  throw new ApiError(
    response.status,
    env.error?.code ?? `HTTP_${String(response.status)}`,
    env.error?.message ?? response.statusText,
    env.error?.traceId,
  );
}

/** Query parameters without the empty ones (an unset filter is not sent). */
function q<T extends Record<string, unknown>>(params: T): T {
  return Object.fromEntries(Object.entries(params).filter(([, v]) => v !== undefined && v !== null && v !== '')) as T;
}

export const api = {
  /** Exchanges a pasted token for the session cookie; the token itself is not kept. */
  async signIn(token: string): Promise<Session> {
    current = await call(http.POST('/api/v1/session', { body: { token } }));
    return current;
  },
  /** The session behind the cookie, if any (on load: the CSRF token lives only in memory). */
  async resume(): Promise<Session | null> {
    try {
      current = await call(http.GET('/api/v1/session'));
    } catch (e) {
      if (e instanceof ApiError && e.status === 401) current = null;
      else throw e;
    }
    return current;
  },
  async signOut(): Promise<void> {
    try {
      await call(http.DELETE('/api/v1/session'));
    } finally {
      current = null;
    }
  },

  // The runs list also answers NDJSON; the console asks for JSON, a page.
  listRuns: (query: { dagId?: string; status?: RunStatusFilter; pageToken?: string; limit?: number }) =>
    call(http.GET('/api/v1/runs', { params: { query: q(query) } })) as Promise<Schemas['RunList']>,
  getRun: (runId: string) => call(http.GET('/api/v1/runs/{runId}', { params: { path: { runId } } })),
  attempts: (runId: string, stepId: string) =>
    call(http.GET('/api/v1/runs/{runId}/steps/{stepId}/attempts', { params: { path: { runId, stepId } } })),
  cancelRun: (runId: string) => call(http.POST('/api/v1/runs/{runId}/cancel', { params: { path: { runId } } })),
  rerunRun: (runId: string, fromStep: string) =>
    call(http.POST('/api/v1/runs/{runId}/rerun', { params: { path: { runId } }, body: { fromStep } })),
  /** A content-addressed artifact (logs, outputs) as text. */
  artifactText: (sha256: string) =>
    call(http.GET('/api/v1/artifacts/{sha256}', { params: { path: { sha256 } }, parseAs: 'text' })),

  listDags: (query: { dagId?: string; pageToken?: string; limit?: number }) =>
    call(http.GET('/api/v1/dags', { params: { query: q(query) } })),
  dagVersion: (dagId: string, version: number) =>
    call(http.GET('/api/v1/dags/{dagId}/versions/{version}', { params: { path: { dagId, version } } })),
  dagGraph: (dagId: string, version: number) =>
    call(http.GET('/api/v1/dags/{dagId}/versions/{version}/graph', { params: { path: { dagId, version } } })),
};

// ---- A run's Gantt, ledger and flow actions ----

export type RunAttempt = Schemas['RunAttempt'];
export type RunEvent = Schemas['RunEvent'];

/** Why an unfinished step is not running (GET /runs/{runId}/explain); a signal step names what it waits for. */
export type StepExplanation = Schemas['RunExplanation']['steps'][number];

export const flowApi = {
  runAttempts: (runId: string) => call(http.GET('/api/v1/runs/{runId}/attempts', { params: { path: { runId } } })),
  events: (runId: string, after: number, limit = 1000) =>
    call(http.GET('/api/v1/runs/{runId}/events', { params: { path: { runId }, query: { after, limit } } })),
  explain: (runId: string) => call(http.GET('/api/v1/runs/{runId}/explain', { params: { path: { runId } } })),
  replay: (runId: string) => call(http.POST('/api/v1/runs/{runId}/replay', { params: { path: { runId } } })),
  decide: (runId: string, stepId: string, decision: 'approved' | 'rejected', comment?: string) =>
    call(
      http.POST('/api/v1/runs/{runId}/steps/{stepId}/decision', {
        params: { path: { runId, stepId } },
        body: { decision, ...(comment ? { comment } : {}) },
      }),
    ),
  signal: (body: { name: string; correlationKey: string; payload?: unknown }) =>
    call(http.POST('/api/v1/signals', { body })),
};

// Schedules, DAG versions' status, bundles and trust keys, tokens, usage, and the operator's tenants
// and queues: the console's remaining pages.

export type CatchUp = 'none' | 'latest' | 'all';
export type Overlap = 'allow' | 'skip' | 'queue' | 'cancel-previous';

export type Schedule = Schemas['Schedule'];

export type FireTimes = Schemas['ScheduleFireTimes'];

export type ScheduleFire = Schemas['ScheduleFireList']['items'][number];
export type Bundle = Schemas['Bundle'];
export type TrustKey = Schemas['TrustKey'];

export type TokenScope = Exclude<Scope, 'platform:admin'> | 'worker';
export type TokenRecord = Schemas['TokenRecord'];
export type MintedToken = Schemas['MintedToken'];

export type MintTokenRequest = Schemas['CreateTokenRequest'];

export type Usage = Schemas['Usage'];
export type Tenant = Schemas['Tenant'];
export type Plan = Schemas['Plan'];
export type TenantQueue = Schemas['TenantQueue'];
export type TenantQueues = Schemas['TenantQueues'];

/** The session's tenant scopes imply one another: admin, then write, then read. */
export function canAdmin(s: Session | null): boolean {
  return !!s && s.scopes.includes('orchestrator:admin');
}

export function isOperator(s: Session | null): boolean {
  return !!s && s.tenantId === null && s.scopes.includes('platform:admin');
}

export const consoleApi = {
  setDagVersionStatus: (dagId: string, version: number, to: 'enable' | 'disable') =>
    call(
      to === 'enable'
        ? http.POST('/api/v1/dags/{dagId}/versions/{version}/enable', { params: { path: { dagId, version } } })
        : http.POST('/api/v1/dags/{dagId}/versions/{version}/disable', { params: { path: { dagId, version } } }),
    ),

  listSchedules: (query: { dagId?: string; pageToken?: string; limit?: number }) =>
    call(http.GET('/api/v1/schedules', { params: { query: q(query) } })),
  getSchedule: (id: string) => call(http.GET('/api/v1/schedules/{id}', { params: { path: { id } } })),
  scheduleNext: (id: string, count: number) =>
    call(http.GET('/api/v1/schedules/{id}/next', { params: { path: { id }, query: { count } } })),
  scheduleFires: (id: string, limit: number) =>
    call(http.GET('/api/v1/schedules/{id}/fires', { params: { path: { id }, query: { limit } } })),
  setSchedulePaused: (id: string, paused: boolean) =>
    call(
      paused
        ? http.POST('/api/v1/schedules/{id}/pause', { params: { path: { id } } })
        : http.POST('/api/v1/schedules/{id}/resume', { params: { path: { id } } }),
    ),

  listBundles: (query: { pageToken?: string; limit?: number }) =>
    call(http.GET('/api/v1/bundles', { params: { query: q(query) } })),
  getBundle: (bundleHash: string) =>
    call(http.GET('/api/v1/bundles/{bundleHash}', { params: { path: { bundleHash } } })),
  listTrustKeys: (query: { pageToken?: string; limit?: number }) =>
    call(http.GET('/api/v1/trust/keys', { params: { query: q(query) } })),
  revokeTrustKey: (kid: string) => call(http.POST('/api/v1/trust/keys/{kid}/revoke', { params: { path: { kid } } })),
  policy: () => call(http.GET('/api/v1/policy')),

  listTokens: (query: { pageToken?: string; limit?: number }) =>
    call(http.GET('/api/v1/tokens', { params: { query: q(query) } })),
  mintToken: (body: MintTokenRequest) => call(http.POST('/api/v1/tokens', { body })),
  revokeToken: (jti: string) => call(http.POST('/api/v1/tokens/{jti}/revoke', { params: { path: { jti } } })),

  usage: () => call(http.GET('/api/v1/usage')),

  listTenants: (query: { pageToken?: string; limit?: number }) =>
    call(http.GET('/api/v1/tenants', { params: { query: q(query) } })),
  setTenantEnabled: (tenantId: string, enabled: boolean) =>
    call(
      enabled
        ? http.POST('/api/v1/tenants/{tenantId}/enable', { params: { path: { tenantId } } })
        : http.POST('/api/v1/tenants/{tenantId}/disable', { params: { path: { tenantId } } }),
    ),
  tenantUsage: (tenantId: string) =>
    call(http.GET('/api/v1/tenants/{tenantId}/usage', { params: { path: { tenantId } } })),
  listPlans: () => call(http.GET('/api/v1/plans')),
  assignPlan: (tenantId: string, planId: string) =>
    call(http.PUT('/api/v1/tenants/{tenantId}/plan', { params: { path: { tenantId } }, body: { planId } })),
  queues: (query: { tenantId?: string; pageToken?: string; limit?: number }) =>
    call(http.GET('/api/v1/admin/queues', { params: { query: q(query) } })),
};
