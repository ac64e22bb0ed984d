import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';

/**
 * The process's Prometheus metrics. One registry per process (metrics describe the process and
 * what it executed); `/metrics` renders it. Label values are tenant ids and statuses only:
 * bounded sets, never user input such as run ids.
 */
export const registry = new Registry();
collectDefaultMetrics({ register: registry, prefix: 'ordo_' });
// prom-client names these gauges `*_total`, which Prometheus reserves for counters (promtool
// rejects them); the per-type breakdowns without the suffix stay.
for (const name of [
  'ordo_nodejs_active_handles_total',
  'ordo_nodejs_active_requests_total',
  'ordo_nodejs_active_resources_total',
]) {
  registry.removeSingleMetric(name);
}

const DURATION_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600];
const LATENCY_BUCKETS = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300];

export const metrics = {
  runsTotal: new Counter({
    name: 'orchestrator_runs_total',
    help: 'Runs that reached a terminal state, by tenant and final status.',
    labelNames: ['tenant', 'status'] as const,
    registers: [registry],
  }),
  runDuration: new Histogram({
    name: 'orchestrator_run_duration_seconds',
    help: 'Wall time of finished runs, from start to the terminal state.',
    labelNames: ['tenant', 'status'] as const,
    buckets: DURATION_BUCKETS,
    registers: [registry],
  }),
  stepDuration: new Histogram({
    name: 'orchestrator_step_duration_seconds',
    help: 'Execution time of step attempts (plugin call), by final attempt status.',
    labelNames: ['tenant', 'status'] as const,
    buckets: DURATION_BUCKETS,
    registers: [registry],
  }),
  stepRetriesTotal: new Counter({
    name: 'orchestrator_step_retries_total',
    help: 'Step attempts scheduled as retries (after a failure or an orphaned lease).',
    labelNames: ['tenant'] as const,
    registers: [registry],
  }),
  dispatchLatency: new Histogram({
    name: 'orchestrator_dispatch_latency_seconds',
    help: 'Time a ready step waited in its tenant queue before a worker claimed it.',
    labelNames: ['tenant'] as const,
    buckets: LATENCY_BUCKETS,
    registers: [registry],
  }),
  queueDepth: new Gauge({
    name: 'orchestrator_queue_depth',
    help: 'Ready steps waiting in each tenant queue (read from the database at scrape time; top tenants by depth, other: the rest).',
    labelNames: ['tenant'] as const,
    registers: [registry],
  }),
  streamConnections: new Gauge({
    name: 'orchestrator_stream_connections',
    help: 'Open WebSocket stream connections on this process.',
    registers: [registry],
  }),
  streamClosedTotal: new Counter({
    name: 'orchestrator_stream_closed_total',
    help: 'WebSocket stream connections closed by the server, by close code.',
    labelNames: ['code'] as const,
    registers: [registry],
  }),
  stepsOrphanedTotal: new Counter({
    name: 'orchestrator_steps_orphaned_total',
    help: 'Step attempts the lease reaper marked orphaned because their lease expired.',
    registers: [registry],
  }),
  reaperLastSuccess: new Gauge({
    name: 'orchestrator_reaper_last_success_timestamp_seconds',
    help: 'Unix time of the last lease reaper pass that completed on this process (0: none, or not a scheduler).',
    registers: [registry],
  }),
  leaseRenewalFailuresTotal: new Counter({
    name: 'orchestrator_lease_renewal_failures_total',
    help: 'Step leases a worker heartbeat did not extend: error (the heartbeat failed) or lost (the lease was no longer held).',
    labelNames: ['reason'] as const,
    registers: [registry],
  }),
  exportFailuresTotal: new Counter({
    name: 'orchestrator_export_failures_total',
    help: 'Exports that failed on the server side after they began (not refused requests), by export: runs or audit.',
    labelNames: ['export'] as const,
    registers: [registry],
  }),
  databaseReady: new Gauge({
    name: 'orchestrator_database_ready',
    help: 'Whether the last readiness check (at scrape time and on /readyz) found the database reachable and its schema current: 1 or 0.',
    registers: [registry],
  }),
  taskDispatchesTotal: new Counter({
    name: 'orchestrator_task_dispatches_total',
    help: 'Dispatches of a pool of external workers (its pending tasks to its workers) run by this process: on a wake-up (tasks opened, slots freed) or by the scheduler sweep.',
    labelNames: ['by'] as const,
    registers: [registry],
  }),
  spansDroppedTotal: new Counter({
    name: 'orchestrator_spans_dropped_total',
    help: 'Spans not stored because the span store buffer was full or the insert failed.',
    registers: [registry],
  }),
};

// Every label value of the rarely moving counters is exported from the start at 0, so the first
// event after a process starts shows as an increase (a series that appears at 1 does not).
for (const reason of ['error', 'lost'] as const) metrics.leaseRenewalFailuresTotal.inc({ reason }, 0);
for (const kind of ['runs', 'audit'] as const) metrics.exportFailuresTotal.inc({ export: kind }, 0);
for (const by of ['wake-up', 'sweep'] as const) metrics.taskDispatchesTotal.inc({ by }, 0);

const seconds = (ms: number) => Math.max(0, ms) / 1000;

/** Records a run reaching a terminal state: the runs counter and (when it started) its duration. */
export function recordRunFinished(tenant: string, status: string, startedAt: Date | null, finishedAt: Date): void {
  metrics.runsTotal.inc({ tenant, status });
  if (startedAt) metrics.runDuration.observe({ tenant, status }, seconds(finishedAt.getTime() - startedAt.getTime()));
}

/** Records a step attempt's execution time with its final attempt status. */
export function recordStepFinished(tenant: string, status: string, startedAt: Date, finishedAt: Date): void {
  metrics.stepDuration.observe({ tenant, status }, seconds(finishedAt.getTime() - startedAt.getTime()));
}

/** Records a claim: how long the step waited in the queue. */
export function recordDispatch(tenant: string, queuedAt: Date, claimedAt: Date): void {
  metrics.dispatchLatency.observe({ tenant }, seconds(claimedAt.getTime() - queuedAt.getTime()));
}

export function recordStepRetry(tenant: string): void {
  metrics.stepRetriesTotal.inc({ tenant });
}

/** Replaces the queue depth gauge with a fresh reading (tenants absent from it read 0 by absence). */
export function setQueueDepths(rows: { tenant: string; depth: number }[]): void {
  metrics.queueDepth.reset();
  for (const r of rows) metrics.queueDepth.set({ tenant: r.tenant }, r.depth);
}

/** Records attempts the lease reaper marked orphaned. */
export function recordStepsOrphaned(attempts: number): void {
  if (attempts > 0) metrics.stepsOrphanedTotal.inc(attempts);
}

/** Records that a lease reaper pass completed (reaped every expired lease it found) at `at`. */
export function recordReaperPassCompleted(at = new Date()): void {
  metrics.reaperLastSuccess.set(at.getTime() / 1000);
}

/** Records leases a heartbeat did not extend, by why. */
export function recordLeaseRenewalFailures(reason: 'error' | 'lost', leases: number): void {
  if (leases > 0) metrics.leaseRenewalFailuresTotal.inc({ reason }, leases);
}

export function recordExportFailure(kind: 'runs' | 'audit'): void {
  metrics.exportFailuresTotal.inc({ export: kind });
}

export function setDatabaseReady(ready: boolean): void {
  metrics.databaseReady.set(ready ? 1 : 0);
}
