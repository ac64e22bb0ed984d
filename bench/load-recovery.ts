import {
  pgClient,
  authHeaders,
  freshDatabase,
  load1,
  log,
  machine,
  Processes,
  publishDag,
  round,
  sleep,
  stats,
  writeResult,
  type LoadOptions,
  type Stats,
} from './support-load';

export interface RecoveryOptions extends LoadOptions {
  trials: number;
  leaseTtlMs: number;
  reaperIntervalMs: number;
}

export interface RecoveryTrial {
  /** SIGKILL of worker A → attempt 2 of the step claimed and dispatched on worker B (attempt.claimed_at). */
  recoveryMs: number;
  /** SIGKILL → attempt 1 marked orphaned by the reaper (lease expiry + sweep). */
  orphanedAfterMs: number | null;
  attempt1Worker: string;
  attempt2Worker: string;
  loadavg1: number;
}

export interface RecoveryResult {
  scenario: 'load-recovery';
  leaseTtlMs: number;
  reaperIntervalMs: number;
  boundMs: number;
  trials: RecoveryTrial[];
  recoveryMs: Stats;
  withinBound: boolean;
  machine: Record<string, unknown>;
  postgresEmbedded: boolean;
}

/**
 * Crashed-worker recovery: a long noop step (retry: 1, no backoff) runs on worker A; worker B is
 * up and idle; A is killed with SIGKILL. Recovery time = attempt 2's claimed_at − the kill (the
 * attempt row is written when a worker claims and dispatches the step; started_at is recorded only
 * with the result). The
 * bound is ORDO_LEASE_TTL_MS + ORDO_REAPER_INTERVAL_MS: the lease lapses at most one TTL after the
 * last heartbeat, and the reaper sweeps at least once per interval.
 */
export async function runRecovery(opts: RecoveryOptions): Promise<RecoveryResult> {
  const db = await freshDatabase(opts.serverUrl, 'load_recovery');
  const procs = new Processes(db);
  const owner = pgClient(db.ownerUrl);
  await owner.connect();
  const env = {
    ORDO_LEASE_TTL_MS: String(opts.leaseTtlMs),
    ORDO_REAPER_INTERVAL_MS: String(opts.reaperIntervalMs),
    ORDO_WORKER_CONCURRENCY: '4',
  };
  const boundMs = opts.leaseTtlMs + opts.reaperIntervalMs;
  try {
    const api = await procs.start('api,scheduler', env);
    const creds = procs.credentials();
    await publishDag(api.url, creds, {
      id: 'recover',
      steps: [
        {
          id: 'long',
          plugin: 'noop',
          with: { sleepMs: 600_000 },
          timeout: '15m',
          retry: { maxRetries: 1, initialDelay: 0 },
        },
      ],
    });
    const attempt = async (runId: string, n: number) =>
      (
        await owner.query<{ started: Date; worker: string; status: string }>(
          `select claimed_at started, worker_id worker, status from attempt where run_id = $1 and attempt = $2`,
          [runId, n],
        )
      ).rows[0];
    const waitFor = async <T>(what: string, fn: () => Promise<T | undefined>, timeoutMs: number): Promise<T> => {
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        const v = await fn();
        if (v !== undefined) return v;
        if (Date.now() > deadline) throw new Error(`load-recovery: timed out waiting for ${what}`);
        await sleep(20);
      }
    };
    const trials: RecoveryTrial[] = [];
    for (let t = 0; t < opts.trials; t++) {
      const a = await procs.start('worker', env);
      const r = await fetch(`${api.url}/api/v1/runs`, {
        method: 'POST',
        headers: authHeaders(creds),
        body: JSON.stringify({ dagId: 'recover', inputs: {}, runToken: `recover-${t}` }),
      });
      if (r.status !== 201) throw new Error(`create run: ${r.status} ${await r.text()}`);
      const { runId } = (await r.json()) as { runId: string };
      const first = await waitFor(
        `attempt 1 to start (worker output: ${a.output().slice(-2000)})`,
        async () => {
          const x = await attempt(runId, 1);
          return x ?? undefined;
        },
        30_000,
      );
      const b = await procs.start('worker', env);
      // B is idle and listening; let A heartbeat at least once more so the kill lands mid-lease.
      await sleep(1000 + Math.random() * (opts.leaseTtlMs / 3));
      const l = load1();
      const killAt = Date.now();
      await a.kill();
      const second = await waitFor(
        'attempt 2 to start',
        async () => {
          const x = await attempt(runId, 2);
          return x ?? undefined;
        },
        boundMs * 4 + 30_000,
      );
      const orphaned = (
        await owner.query<{ at: Date | null }>(
          `select min(created_at) at from run_event where run_id = $1 and type in ('step.orphaned', 'attempt.orphaned')`,
          [runId],
        )
      ).rows[0].at;
      const trial: RecoveryTrial = {
        recoveryMs: second.started.getTime() - killAt,
        orphanedAfterMs: orphaned ? orphaned.getTime() - killAt : null,
        attempt1Worker: first.worker,
        attempt2Worker: second.worker,
        loadavg1: l,
      };
      trials.push(trial);
      log(
        `load-recovery #${t}: kill → running again ${trial.recoveryMs} ms (bound ${boundMs} ms), ${first.worker} → ${second.worker}`,
      );
      await fetch(`${api.url}/api/v1/runs/${runId}/cancel`, { method: 'POST', headers: authHeaders(creds) });
      await b.stop();
    }
    const s = stats(trials.map((x) => x.recoveryMs));
    return {
      scenario: 'load-recovery',
      leaseTtlMs: opts.leaseTtlMs,
      reaperIntervalMs: opts.reaperIntervalMs,
      boundMs,
      trials,
      recoveryMs: s,
      withinBound: trials.every((x) => x.recoveryMs <= boundMs && x.attempt1Worker !== x.attempt2Worker),
      machine: machine(),
      postgresEmbedded: db.embedded,
    };
  } finally {
    await owner.end();
    await procs.stopAll();
    await db.close();
  }
}

export function recoveryRow(r: RecoveryResult): string[] {
  return [
    `crashed-worker recovery (SIGKILL → step running on another worker), ${r.trials.length} trials`,
    `max ${r.recoveryMs.max} ms, mean ${r.recoveryMs.mean} ms (×${round((r.recoveryMs.max ?? 0) / r.boundMs)} of bound)`,
    `≤ lease TTL ${r.leaseTtlMs} + reaper ${r.reaperIntervalMs} = ${r.boundMs} ms`,
    r.trials.map((t) => t.loadavg1).join(', '),
  ];
}

export const writeRecovery = (outDir: string, r: RecoveryResult) => writeResult(outDir, 'load-recovery', r);
