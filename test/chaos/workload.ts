import type { Cluster, OrdoProcess } from './cluster';
import { sleep } from './cluster';

/**
 * The mixed workload: several tenants submit chains, diamonds, always-failing retries, timeouts
 * and runs they cancel, round-robin over the api processes, at a steady rate. Every run carries a
 * harness-made runToken, recorded when submitted and when Ordo acknowledged it; a request that
 * fails (5xx, connection refused) is repeated with the same token until it is acknowledged.
 */

export type Kind = 'chain' | 'diamond' | 'retry' | 'timeout' | 'cancel' | 'slow' | 'three' | 'queue';

/** The pool and task type of the worker cell's external workers (external-worker.ts). */
export const WORKER_POOL = 'chaos';
export const WORKER_TASK_TYPE = 'chaos-echo';

const retry = { maxRetries: 20, initialDelay: 100, multiplier: 2, maxDelay: 1_000 };

/** A step for the external workers after step `after`, passing its `k` on. */
const queueStep = (id: string, after: string) => ({
  id,
  plugin: 'queue',
  dependsOn: [after],
  timeout: 30_000,
  retry: { maxRetries: 5, initialDelay: 100 },
  with: { taskType: WORKER_TASK_TYPE, pool: WORKER_POOL, inputs: { k: `\${{ steps.${after}.outputs.k }}` } },
});

export const DAGS: Record<Kind, Record<string, unknown>> = {
  chain: {
    id: 'chaos-chain',
    inputs: { type: 'object', properties: { k: { type: 'string' } }, required: ['k'] },
    steps: [
      { id: 's1', plugin: 'noop', retry, with: { output: { k: '${{ inputs.k }}', n: 1 } } },
      {
        id: 's2',
        plugin: 'noop',
        retry,
        dependsOn: ['s1'],
        with: { output: { k: '${{ steps.s1.outputs.k }}', n: 2 } },
      },
      {
        id: 's3',
        plugin: 'noop',
        retry,
        dependsOn: ['s2'],
        with: { output: { k: '${{ steps.s2.outputs.k }}', n: 3 } },
      },
    ],
  },
  // The storm's three-step runs: the same shape as `chain`, a DAG of its own so they are counted apart.
  three: {
    id: 'chaos-three',
    inputs: { type: 'object', properties: { k: { type: 'string' } }, required: ['k'] },
    steps: [
      { id: 's1', plugin: 'noop', retry, with: { output: { k: '${{ inputs.k }}', n: 1 } } },
      {
        id: 's2',
        plugin: 'noop',
        retry,
        dependsOn: ['s1'],
        with: { output: { k: '${{ steps.s1.outputs.k }}', n: 2 } },
      },
      {
        id: 's3',
        plugin: 'noop',
        retry,
        dependsOn: ['s2'],
        with: { output: { k: '${{ steps.s2.outputs.k }}', n: 3 } },
      },
    ],
  },
  diamond: {
    id: 'chaos-diamond',
    inputs: { type: 'object', properties: { k: { type: 'string' } }, required: ['k'] },
    steps: [
      { id: 'a', plugin: 'noop', retry, with: { output: { k: '${{ inputs.k }}' } } },
      {
        id: 'b',
        plugin: 'noop',
        retry,
        dependsOn: ['a'],
        with: { output: { k: '${{ steps.a.outputs.k }}', side: 'b' } },
      },
      {
        id: 'c',
        plugin: 'noop',
        retry,
        dependsOn: ['a'],
        with: { output: { k: '${{ steps.a.outputs.k }}', side: 'c' } },
      },
      {
        id: 'd',
        plugin: 'noop',
        retry,
        dependsOn: ['b', 'c'],
        with: {
          output: { b: '${{ steps.b.outputs.side }}', c: '${{ steps.c.outputs.side }}', k: '${{ steps.b.outputs.k }}' },
        },
      },
    ],
  },
  // Held by a worker for a while: a paused worker is caught holding some.
  slow: {
    id: 'chaos-slow',
    inputs: { type: 'object', properties: { k: { type: 'string' } }, required: ['k'] },
    steps: [{ id: 'z', plugin: 'noop', retry, with: { sleepMs: 3_000, output: { k: '${{ inputs.k }}' } } }],
  },
  // Two steps handed to external workers between two noops: the first claimed by the built-in
  // worker, the second handed over in the transaction of the first one's result. The worker cell's runs.
  queue: {
    id: 'chaos-queue',
    inputs: { type: 'object', properties: { k: { type: 'string' } }, required: ['k'] },
    steps: [
      { id: 'first', plugin: 'noop', retry, with: { output: { k: '${{ inputs.k }}' } } },
      queueStep('work', 'first'),
      queueStep('relay', 'work'),
      {
        id: 'last',
        plugin: 'noop',
        retry,
        dependsOn: ['relay'],
        with: { output: { k: '${{ steps.relay.outputs.k }}' } },
      },
    ],
  },
  retry: {
    id: 'chaos-retry',
    inputs: { type: 'object', properties: { k: { type: 'string' } } },
    steps: [
      {
        id: 'f',
        plugin: 'noop',
        with: { fail: true, retryable: true },
        retry: { maxRetries: 2, initialDelay: 100, multiplier: 2, maxDelay: 400 },
      },
    ],
  },
  timeout: {
    id: 'chaos-timeout',
    inputs: { type: 'object', properties: { k: { type: 'string' } } },
    steps: [
      { id: 't', plugin: 'noop', with: { sleepMs: 5_000 }, timeout: 150, retry: { maxRetries: 1, initialDelay: 100 } },
    ],
  },
  cancel: {
    id: 'chaos-cancel',
    inputs: { type: 'object', properties: { k: { type: 'string' } } },
    steps: [
      { id: 'w', plugin: 'noop', retry, with: { sleepMs: 8_000, output: { never: true } } },
      { id: 'x', plugin: 'noop', retry, dependsOn: ['w'] },
    ],
  },
};

export const SCHEDULE_DAG = {
  id: 'chaos-tick',
  steps: [{ id: 'tick', plugin: 'noop', retry, with: { output: { tick: true } } }],
};

/** The step outputs a successful run of `kind` with inputs {k} must end with; undefined: not checked. */
export function expectedOutputs(kind: Kind, k: string): Record<string, unknown> | undefined {
  if (kind === 'chain' || kind === 'three') return { s1: { k, n: 1 }, s2: { k, n: 2 }, s3: { k, n: 3 } };
  if (kind === 'slow') return { z: { k } };
  // The worker's own outputs name the worker and the attempt: checked by checkWorkerTasks.
  if (kind === 'queue') return { first: { k }, last: { k } };
  if (kind === 'diamond') return { a: { k }, b: { k, side: 'b' }, c: { k, side: 'c' }, d: { b: 'b', c: 'c', k } };
  return undefined;
}

export function expectedStatus(kind: Kind): string {
  if (kind === 'retry' || kind === 'timeout') return 'failed';
  if (kind === 'cancel') return 'cancelled';
  return 'succeeded';
}

export interface Tenant {
  id: string;
  token: string;
}

export interface Submitted {
  token: string;
  tenant: string;
  kind: Kind;
  k: string;
  submittedAt: number;
  ackedAt?: number;
  runId?: string;
  /** A cancel was acknowledged (or the run had already finished). */
  cancelled?: boolean;
}

export interface HttpResult {
  status: number;
  body: Record<string, unknown>;
}

export class Api {
  private rr = 0;
  constructor(private readonly cluster: Cluster) {}

  private next(): OrdoProcess {
    const apis = this.cluster.live('api');
    if (apis.length === 0) throw new Error('no api process');
    return apis[this.rr++ % apis.length];
  }

  async call(
    method: string,
    path: string,
    opts: { token: string; tenant?: string; body?: unknown; timeoutMs?: number },
  ): Promise<HttpResult> {
    const p = this.next();
    const headers: Record<string, string> = { authorization: `Bearer ${opts.token}` };
    if (opts.tenant) headers['x-tenant-id'] = opts.tenant;
    if (opts.body !== undefined) headers['content-type'] = 'application/json';
    const r = await fetch(`${p.url}${path}`, {
      method,
      headers,
      body: opts.body === undefined ? undefined : JSON.stringify(opts.body),
      signal: AbortSignal.timeout(opts.timeoutMs ?? 15_000),
    });
    const text = await r.text();
    let body: Record<string, unknown> = {};
    try {
      body = text ? (JSON.parse(text) as Record<string, unknown>) : {};
    } catch {
      body = { text };
    }
    return { status: r.status, body };
  }

  /** Repeats a request on 5xx, 429 and connection errors until it gets another answer or `deadline`. */
  async persist(
    method: string,
    path: string,
    opts: { token: string; tenant?: string; body?: unknown },
    deadline: number,
  ): Promise<HttpResult> {
    let delay = 50;
    let last = '';
    for (;;) {
      try {
        const r = await this.call(method, path, opts);
        if (r.status < 500 && r.status !== 429) return r;
        last = `${r.status} ${JSON.stringify(r.body).slice(0, 300)}`;
      } catch (e) {
        // Connection refused or reset, timeout: the same request again.
        last = (e as Error).message;
      }
      if (Date.now() > deadline) throw new Error(`${method} ${path}: no answer before the deadline (last: ${last})`);
      await sleep(delay);
      delay = Math.min(delay * 2, 1_000);
    }
  }
}

export async function setupTenants(api: Api, platformToken: string, n: number, prefix: string): Promise<Tenant[]> {
  const deadline = Date.now() + 60_000;
  const out: Tenant[] = [];
  for (let i = 0; i < n; i++) {
    const id = `${prefix}${i + 1}`;
    const c = await api.persist('POST', '/api/v1/tenants', { token: platformToken, body: { id, name: id } }, deadline);
    if (c.status !== 201 && c.status !== 409)
      throw new Error(`create tenant ${id}: ${c.status} ${JSON.stringify(c.body)}`);
    const t = await api.persist(
      'POST',
      `/api/v1/tenants/${id}/tokens`,
      { token: platformToken, body: { scopes: ['orchestrator:admin'] } },
      deadline,
    );
    if (t.status !== 201) throw new Error(`mint token for ${id}: ${t.status} ${JSON.stringify(t.body)}`);
    const tenant = { id, token: t.body.token as string };
    for (const def of [...Object.values(DAGS), SCHEDULE_DAG]) {
      const r = await api.persist('POST', '/api/v1/dags', { token: tenant.token, tenant: id, body: def }, deadline);
      if (r.status !== 201 && r.status !== 200)
        throw new Error(`publish ${String(def.id)}: ${r.status} ${JSON.stringify(r.body)}`);
    }
    out.push(tenant);
  }
  return out;
}

const MIX: [Kind, number][] = [
  ['chain', 45],
  ['diamond', 22],
  ['slow', 10],
  ['retry', 8],
  ['timeout', 7],
  ['cancel', 8],
];

function pick(i: number): Kind {
  // Deterministic mix: position i of a 100-slot wheel.
  let slot = (i * 37) % 100;
  for (const [k, w] of MIX) {
    if (slot < w) return k;
    slot -= w;
  }
  return 'chain';
}

/**
 * Submits runs at `rate` per second (open loop: slow answers do not slow the load down) until
 * stopped; `rate` can change at any time (the burst cell multiplies it).
 */
export class Submitter {
  readonly runs: Submitted[] = [];
  rate: number;
  private stopped = false;
  private loop?: Promise<void>;
  private readonly pending = new Set<Promise<void>>();
  private n = 0;
  errors = 0;
  /** The most runs this submitter submits; the loop stops submitting once it has. */
  limit = Infinity;

  constructor(
    private readonly api: Api,
    private readonly tenants: Tenant[],
    private readonly cell: string,
    rate: number,
    private readonly kinds?: Kind[],
  ) {
    this.rate = rate;
  }

  start(): void {
    this.loop = (async () => {
      let due = Date.now();
      while (!this.stopped) {
        const now = Date.now();
        while (due <= now && !this.stopped && this.n < this.limit) {
          this.submitOne();
          due += 1000 / this.rate;
        }
        if (due < now - 1000) due = now; // never replay more than a second of missed ticks at once
        await sleep(Math.max(1, Math.min(50, due - Date.now())));
      }
    })();
  }

  /** Submits exactly `count` runs of `kind` as fast as `concurrency` allows. */
  async submitCount(kind: Kind, count: number, concurrency: number): Promise<void> {
    let i = 0;
    const worker = async () => {
      while (i < count) {
        i++;
        await this.submit(kind);
      }
    };
    await Promise.all(Array.from({ length: concurrency }, worker));
  }

  private submitOne(): void {
    const kind = this.kinds ? this.kinds[this.n % this.kinds.length] : pick(this.n);
    const p = this.submit(kind).finally(() => this.pending.delete(p));
    this.pending.add(p);
  }

  private async submit(kind: Kind): Promise<void> {
    const i = this.n++;
    const tenant = this.tenants[i % this.tenants.length];
    const k = `${this.cell}-${i}`;
    const s: Submitted = { token: `chaos:${k}`, tenant: tenant.id, kind, k, submittedAt: Date.now() };
    this.runs.push(s);
    const deadline = Date.now() + 120_000;
    try {
      const r = await this.api.persist(
        'POST',
        '/api/v1/runs',
        { token: tenant.token, tenant: tenant.id, body: { dagId: DAGS[kind].id, inputs: { k }, runToken: s.token } },
        deadline,
      );
      if (r.status !== 201 && r.status !== 200) throw new Error(`POST /runs ${r.status} ${JSON.stringify(r.body)}`);
      s.ackedAt = Date.now();
      s.runId = r.body.runId as string;
      if (kind === 'cancel') {
        await sleep(300);
        const c = await this.api.persist(
          'POST',
          `/api/v1/runs/${s.runId}/cancel`,
          { token: tenant.token, tenant: tenant.id },
          deadline,
        );
        if (c.status >= 400 && c.status !== 409) throw new Error(`cancel ${c.status} ${JSON.stringify(c.body)}`);
        s.cancelled = c.status < 400;
      }
    } catch (e) {
      this.errors++;
      if (this.errors <= 5) process.stderr.write(`chaos: submit ${s.token}: ${(e as Error).message}\n`);
    }
  }

  async stop(): Promise<void> {
    this.stopped = true;
    await this.loop;
    await Promise.all([...this.pending]);
  }
}
