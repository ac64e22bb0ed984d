// Every call the console makes to the API goes through this module: same origin, the session cookie
// (HttpOnly, never visible here) for authentication, the CSRF token held in memory on each
// state-changing request, and the API's error envelope turned into an ApiError. Its types are the
// API's schemas as generated from the OpenAPI document (sdk/client, checked in CI).
import type { components } from '../../sdk/client/src/api.generated';

type Schemas = components['schemas'];

export type Scope = 'orchestrator:read' | 'orchestrator:write' | 'orchestrator:admin' | 'platform:admin';

export type Session = Schemas['ConsoleSession'];

export const RUN_STATES = ['queued', 'running', 'succeeded', 'failed', 'cancelled'] as const;
export type RunStatus = (typeof RUN_STATES)[number];

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

type Method = 'GET' | 'POST' | 'PUT' | 'DELETE';

async function request(method: Method, path: string, body?: unknown): Promise<Response> {
  const headers: Record<string, string> = { accept: 'application/json' };
  if (body !== undefined) headers['content-type'] = 'application/json';
  if (current?.tenantId) headers['x-tenant-id'] = current.tenantId;
  if (method !== 'GET' && current) headers['x-csrf-token'] = current.csrfToken;
  const res = await fetch(`/api/v1${path}`, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    credentials: 'same-origin',
    cache: 'no-store',
  });
  if (res.ok) return res;
  let code = 'HTTP_' + String(res.status);
  let message = res.statusText;
  let traceId: string | undefined;
  try {
    const env = (await res.json()) as { error?: { code?: string; message?: string; traceId?: string } };
    code = env.error?.code ?? code;
    message = env.error?.message ?? message;
    traceId = env.error?.traceId;
  } catch {
    // Not the envelope (a proxy's page): the status says enough.
  }
  if (res.status === 401 && current && path !== '/session') {
    current = null;
    for (const fn of signedOutListeners) fn();
  }
  throw new ApiError(res.status, code, message, traceId);
}

async function json<T>(method: Method, path: string, body?: unknown): Promise<T> {
  return (await (await request(method, path, body)).json()) as T;
}

function query(params: Record<string, string | number | undefined | null>): string {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== '') q.set(k, String(v));
  const s = q.toString();
  return s ? `?${s}` : '';
}

const enc = encodeURIComponent;

export const api = {
  /** Exchanges a pasted token for the session cookie; the token itself is not kept. */
  async signIn(token: string): Promise<Session> {
    current = await json<Session>('POST', '/session', { token });
    return current;
  },
  /** The session behind the cookie, if any (on load: the CSRF token lives only in memory). */
  async resume(): Promise<Session | null> {
    try {
      current = await json<Session>('GET', '/session');
    } catch (e) {
      if (e instanceof ApiError && e.status === 401) current = null;
      else throw e;
    }
    return current;
  },
  async signOut(): Promise<void> {
    try {
      await request('DELETE', '/session');
    } finally {
      current = null;
    }
  },

  listRuns: (q: { dagId?: string; status?: string; pageToken?: string; limit?: number }) =>
    json<Page<Run>>('GET', `/runs${query(q)}`),
  getRun: (runId: string) => json<RunDetail>('GET', `/runs/${enc(runId)}`),
  attempts: (runId: string, stepId: string) =>
    json<{ items: Attempt[] }>('GET', `/runs/${enc(runId)}/steps/${enc(stepId)}/attempts`),
  cancelRun: (runId: string) => json<unknown>('POST', `/runs/${enc(runId)}/cancel`),
  rerunRun: (runId: string, fromStep: string) =>
    json<{ runId: string }>('POST', `/runs/${enc(runId)}/rerun`, { fromStep }),
  /** A content-addressed artifact (logs, outputs) as text. */
  artifactText: async (sha256: string) => (await request('GET', `/artifacts/${enc(sha256)}`)).text(),

  listDags: (q: { dagId?: string; pageToken?: string; limit?: number }) =>
    json<Page<DagVersionSummary>>('GET', `/dags${query(q)}`),
  dagVersion: (dagId: string, version: number) =>
    json<DagVersion>('GET', `/dags/${enc(dagId)}/versions/${String(version)}`),
  dagGraph: (dagId: string, version: number) =>
    json<DagGraph>('GET', `/dags/${enc(dagId)}/versions/${String(version)}/graph`),
};

// ---- A run's Gantt, ledger and flow actions ----

export type RunAttempt = Schemas['RunAttempt'];
export type RunEvent = Schemas['RunEvent'];

/** Why an unfinished step is not running (GET /runs/{runId}/explain); a signal step names what it waits for. */
export interface StepExplanation {
  stepId: string;
  status: StepStatus;
  reason: string;
  name?: string;
  correlationKey?: string;
}

export const flowApi = {
  runAttempts: (runId: string) => json<{ items: RunAttempt[] }>('GET', `/runs/${enc(runId)}/attempts`),
  events: (runId: string, after: number, limit = 1000) =>
    json<{ items: RunEvent[]; nextAfter: number | null }>(
      'GET',
      `/runs/${enc(runId)}/events${query({ after, limit })}`,
    ),
  explain: (runId: string) => json<{ steps: StepExplanation[] }>('GET', `/runs/${enc(runId)}/explain`),
  replay: (runId: string) => json<{ runId: string }>('POST', `/runs/${enc(runId)}/replay`),
  decide: (runId: string, stepId: string, decision: 'approved' | 'rejected', comment?: string) =>
    json<unknown>('POST', `/runs/${enc(runId)}/steps/${enc(stepId)}/decision`, {
      decision,
      ...(comment ? { comment } : {}),
    }),
  signal: (body: { name: string; correlationKey: string; payload?: unknown }) =>
    json<{ signalId: string; status: 'pending' | 'delivered' }>('POST', '/signals', body),
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
    json<DagVersion>('POST', `/dags/${enc(dagId)}/versions/${String(version)}/${to}`),

  listSchedules: (q: { dagId?: string; pageToken?: string; limit?: number }) =>
    json<Page<Schedule>>('GET', `/schedules${query(q)}`),
  getSchedule: (id: string) => json<Schedule>('GET', `/schedules/${enc(id)}`),
  scheduleNext: (id: string, count: number) => json<FireTimes>('GET', `/schedules/${enc(id)}/next${query({ count })}`),
  scheduleFires: (id: string, limit: number) =>
    json<{ items: ScheduleFire[] }>('GET', `/schedules/${enc(id)}/fires${query({ limit })}`),
  setSchedulePaused: (id: string, paused: boolean) =>
    json<Schedule>('POST', `/schedules/${enc(id)}/${paused ? 'pause' : 'resume'}`),

  listBundles: (q: { pageToken?: string; limit?: number }) => json<Page<Bundle>>('GET', `/bundles${query(q)}`),
  getBundle: (hash: string) => json<Bundle>('GET', `/bundles/${enc(hash)}`),
  listTrustKeys: (q: { pageToken?: string; limit?: number }) => json<Page<TrustKey>>('GET', `/trust/keys${query(q)}`),
  revokeTrustKey: (kid: string) => json<TrustKey>('POST', `/trust/keys/${enc(kid)}/revoke`),
  policy: () => json<{ requireSignedDags: boolean }>('GET', '/policy'),

  listTokens: (q: { pageToken?: string; limit?: number }) => json<Page<TokenRecord>>('GET', `/tokens${query(q)}`),
  mintToken: (body: MintTokenRequest) => json<MintedToken>('POST', '/tokens', body),
  revokeToken: (jti: string) => json<{ jti: string; revokedAt: string }>('POST', `/tokens/${enc(jti)}/revoke`),

  usage: () => json<Usage>('GET', '/usage'),

  listTenants: (q: { pageToken?: string; limit?: number }) => json<Page<Tenant>>('GET', `/tenants${query(q)}`),
  setTenantEnabled: (tenantId: string, enabled: boolean) =>
    json<Tenant>('POST', `/tenants/${enc(tenantId)}/${enabled ? 'enable' : 'disable'}`),
  tenantUsage: (tenantId: string) => json<Usage>('GET', `/tenants/${enc(tenantId)}/usage`),
  listPlans: () => json<{ items: Plan[] }>('GET', '/plans'),
  assignPlan: (tenantId: string, planId: string) => json<unknown>('PUT', `/tenants/${enc(tenantId)}/plan`, { planId }),
  queues: (q: { tenantId?: string; pageToken?: string; limit?: number }) =>
    json<TenantQueues>('GET', `/admin/queues${query(q)}`),
};
