import { Injectable, Logger, type OnApplicationShutdown } from '@nestjs/common';
import { Database } from '../../core/database/database';
import { WorkersRepository } from './workers.repository';

/** How long calls are gathered before one statement records them. */
const FLUSH_MS = 1_000;

export interface Beat {
  status: 'online' | 'draining' | 'offline';
  ttlMs: number;
  cancel: { attemptId: string; reason: string }[];
}

interface Pending {
  tenantId: string;
  workerId: string;
  loaded: string[] | null;
  waiters: { resolve: (b: Beat) => void; reject: (e: unknown) => void }[];
}

/**
 * When workers were last heard from, written in batches: every heartbeat, pull, result and open
 * channel of the last second is recorded by one transaction (their rows, their tokens' last-seen,
 * and the tasks each heartbeating worker must stop), so a thousand idle workers cost about one
 * transaction a second. A heartbeat's answer waits for the batch it joined.
 */
@Injectable()
export class WorkerLiveness implements OnApplicationShutdown {
  private readonly log = new Logger('workers');
  private pending = new Map<string, Pending>();
  private timer: NodeJS.Timeout | null = null;
  private flushing: Promise<void> | null = null;

  constructor(
    private readonly db: Database,
    private readonly repo: WorkersRepository,
  ) {}

  /** The worker was heard from (no answer needed). */
  seen(tenantId: string, workerId: string): void {
    this.entry(tenantId, workerId);
  }

  /** A heartbeat: answered with the worker's status and the tasks it must stop, once recorded. */
  beat(tenantId: string, workerId: string, loaded: string[] | null): Promise<Beat> {
    const e = this.entry(tenantId, workerId);
    if (loaded !== null) e.loaded = loaded;
    return new Promise((resolve, reject) => e.waiters.push({ resolve, reject }));
  }

  async onApplicationShutdown(): Promise<void> {
    if (this.timer) clearTimeout(this.timer);
    await this.flushing;
    if (this.pending.size > 0) await this.flush();
  }

  private entry(tenantId: string, workerId: string): Pending {
    const k = `${tenantId}\u0000${workerId}`;
    let e = this.pending.get(k);
    if (!e) this.pending.set(k, (e = { tenantId, workerId, loaded: null, waiters: [] }));
    this.timer ??= setTimeout(() => {
      this.timer = null;
      this.flushing = this.flush().finally(() => (this.flushing = null));
    }, FLUSH_MS);
    return e;
  }

  private async flush(): Promise<void> {
    const batch = [...this.pending.values()];
    this.pending = new Map();
    if (batch.length === 0) return;
    try {
      const r = await this.db.withSystem((tx) =>
        this.repo.touch(
          tx,
          batch.map((b) => ({
            tenantId: b.tenantId,
            workerId: b.workerId,
            loaded: b.loaded,
            beat: b.waiters.length > 0,
          })),
        ),
      );
      const status = new Map(r.statuses.map((s) => [`${s.tenant_id}\u0000${s.worker_id}`, s]));
      for (const b of batch) {
        if (b.waiters.length === 0) continue;
        const k = `${b.tenantId}\u0000${b.workerId}`;
        const s = status.get(k);
        const beat: Beat = {
          status: (s?.status ?? 'offline') as Beat['status'],
          ttlMs: s?.ttl_ms ?? 0,
          cancel: r.cancels
            .filter((c) => c.tenant_id === b.tenantId && c.worker_id === b.workerId)
            .map((c) => ({ attemptId: c.task_id, reason: c.reason })),
        };
        for (const w of b.waiters) w.resolve(beat);
      }
    } catch (e) {
      this.log.warn({ err: e, workers: batch.length }, 'recording worker liveness failed');
      for (const b of batch) for (const w of b.waiters) w.reject(e);
    }
  }
}
