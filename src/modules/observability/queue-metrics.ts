import { Counter, Gauge } from 'prom-client';
import { registry, setQueueDepths } from '../../core/telemetry/metrics';

/**
 * The per-tenant queue and limit metrics with bounded label cardinality: the top N tenants are
 * named (by ready depth for the queue gauges, by limit hits for the counter) and the rest are
 * summed under `tenant="other"`. A tenant whose id is `other` is always in that sum.
 */
export const OTHER = 'other';

export const queueMetrics = {
  oldestReady: new Gauge({
    name: 'orchestrator_oldest_ready_seconds',
    help: "Age of the first ready step in each tenant's queue (top tenants by depth; other: the oldest of the rest).",
    labelNames: ['tenant'] as const,
    registers: [registry],
  }),
  limitHits: new Counter({
    name: 'orchestrator_limit_hits_total',
    help: 'Requests and creations refused by a plan limit, by tenant (top tenants by hits; other: the rest) and limit, from every api process, counted since this process started.',
    labelNames: ['tenant', 'limit'] as const,
    registers: [registry],
  }),
};

export interface ReadyQueue {
  tenant: string;
  depth: number;
  oldestSeconds: number;
}

/** The top `n` of `keys` by `score` (higher first, then by key), never `other`. */
export function topTenants<T>(items: T[], n: number, key: (t: T) => string, score: (t: T) => number): Set<string> {
  return new Set(
    items
      .filter((t) => key(t) !== OTHER)
      .sort((a, b) => score(b) - score(a) || (key(a) < key(b) ? -1 : key(a) > key(b) ? 1 : 0))
      .slice(0, n)
      .map(key),
  );
}

/**
 * Sets the queue depth and oldest-ready gauges from a reading of every tenant's ready queue: the
 * top `n` tenants by depth by name, the rest as `other` (depths summed, the oldest age kept).
 */
export function setQueueGauges(queues: ReadyQueue[], n: number): void {
  const named = topTenants(
    queues,
    n,
    (q) => q.tenant,
    (q) => q.depth,
  );
  const rest = queues.filter((q) => !named.has(q.tenant));
  const shown = queues.filter((q) => named.has(q.tenant));
  if (rest.length > 0) {
    shown.push({
      tenant: OTHER,
      depth: rest.reduce((s, q) => s + q.depth, 0),
      oldestSeconds: Math.max(...rest.map((q) => q.oldestSeconds)),
    });
  }
  setQueueDepths(shown.map((q) => ({ tenant: q.tenant, depth: q.depth })));
  queueMetrics.oldestReady.reset();
  for (const q of shown) queueMetrics.oldestReady.set({ tenant: q.tenant }, q.oldestSeconds);
}

export interface LimitHitRow {
  tenant: string;
  limit: string;
  minute: Date;
  hits: number;
}

const MINUTE = 60_000;
/** A minute's hits are final this long after it began (api processes flush theirs every second). */
const SETTLED_MS = 3 * MINUTE;

/**
 * Turns the limit_hit table (hits per tenant, limit and minute, upserted by every api process)
 * into the monotonic orchestrator_limit_hits_total counter: each reading adds what grew since the
 * previous one. Minutes are read from this process's start until they are settled. Tenants are
 * named while they are among the top N by hits counted so far; a tenant that leaves them loses its
 * series, and its further hits (and those of every unnamed tenant) go to `other`, so every series
 * only grows.
 */
export class LimitHitsTally {
  private readonly seen = new Map<string, number>();
  private readonly totals = new Map<string, number>();
  private readonly namedLimits = new Map<string, Set<string>>();
  private since: Date;

  constructor(startedAt: Date) {
    this.since = floorMinute(startedAt);
  }

  /** The first minute the next reading must include. */
  readFrom(): Date {
    return this.since;
  }

  /** Applies a reading of the rows from readFrom() on, taken at `now` (the database's clock). */
  apply(rows: LimitHitRow[], now: Date, n: number): void {
    const deltas: { tenant: string; limit: string; d: number }[] = [];
    for (const r of rows) {
      const key = `${r.tenant}\u0000${r.limit}\u0000${r.minute.getTime()}`;
      const d = r.hits - (this.seen.get(key) ?? 0);
      this.seen.set(key, r.hits);
      if (d <= 0) continue;
      deltas.push({ tenant: r.tenant, limit: r.limit, d });
      this.totals.set(r.tenant, (this.totals.get(r.tenant) ?? 0) + d);
    }
    const named = topTenants(
      [...this.totals],
      n,
      ([t]) => t,
      ([, hits]) => hits,
    );
    for (const [tenant, limits] of this.namedLimits) {
      if (named.has(tenant)) continue;
      for (const limit of limits) queueMetrics.limitHits.remove({ tenant, limit });
      this.namedLimits.delete(tenant);
    }
    for (const { tenant, limit, d } of deltas) {
      if (named.has(tenant)) {
        const limits = this.namedLimits.get(tenant) ?? new Set<string>();
        limits.add(limit);
        this.namedLimits.set(tenant, limits);
        queueMetrics.limitHits.inc({ tenant, limit }, d);
      } else {
        queueMetrics.limitHits.inc({ tenant: OTHER, limit }, d);
      }
    }
    // Settled minutes are not read again.
    const settled = floorMinute(new Date(now.getTime() - SETTLED_MS));
    if (settled > this.since) {
      this.since = settled;
      for (const key of this.seen.keys()) {
        if (Number(key.slice(key.lastIndexOf('\u0000') + 1)) < settled.getTime()) this.seen.delete(key);
      }
    }
  }
}

function floorMinute(d: Date): Date {
  return new Date(Math.floor(d.getTime() / MINUTE) * MINUTE);
}
