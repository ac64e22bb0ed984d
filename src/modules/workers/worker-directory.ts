import { Injectable } from '@nestjs/common';
import { Database } from '../../core/database/database';
import { conflict, notFound } from '../../core/errors/domain-error';
import type { WorkerPrincipalT } from '../../core/http/request-context';
import type { JsonObject } from '../plugins/plugin';
import { TaskInbox } from './task-inbox';
import { WorkersRepository } from './workers.repository';

/** What a process needs to know of a worker to serve its calls. */
export interface KnownWorker {
  tenantId: string;
  workerId: string;
  pool: string;
  name: string;
  /** The token that registered it: the one credential that acts for it. */
  tokenJti: string;
  status: 'online' | 'draining' | 'offline';
  ttlMs: number;
  taskTypes: Record<string, { inputSchema?: JsonObject; outputSchema?: JsonObject }>;
}

const MAX_KNOWN = 50_000;

/**
 * The workers this process serves, read once through the worker's own tenant and pool (RLS) and
 * kept: their status follows `ordo_worker` notifications, so serving a pull or a heartbeat costs
 * no query to find who is calling. A worker is found only with the token that registered it: one
 * of another tenant or pool, or registered with another token of the same pool, is not found
 * (404), as an unknown id is.
 */
@Injectable()
export class WorkerDirectory {
  private readonly known = new Map<string, KnownWorker>();

  constructor(
    private readonly db: Database,
    private readonly repo: WorkersRepository,
    private readonly inbox: TaskInbox,
  ) {
    inbox.onStatus((tenantId, workerId, status) => {
      const w = this.known.get(workerId);
      if (w && w.tenantId === tenantId) w.status = status as KnownWorker['status'];
      if (status === 'offline') inbox.forget(tenantId, workerId);
    });
  }

  /** The caller's worker `workerId` (404 WORKER_NOT_FOUND when the caller's token did not register it). */
  async get(p: WorkerPrincipalT, workerId: string): Promise<KnownWorker> {
    const k = this.known.get(workerId);
    if (k && k.tenantId === p.tenantId && k.pool === p.pool && k.tokenJti === p.jti) return k;
    if (k) throw notFound(`worker ${workerId}`, 'WORKER_NOT_FOUND');
    const row = await this.db.withWorkerPool(p.tenantId, p.pool, (tx) => this.repo.findWorker(tx, workerId));
    if (!row || row.token_jti !== p.jti) throw notFound(`worker ${workerId}`, 'WORKER_NOT_FOUND');
    const w: KnownWorker = {
      tenantId: row.tenant_id,
      workerId: row.worker_id,
      pool: row.pool,
      name: row.name,
      tokenJti: row.token_jti,
      status: row.status,
      ttlMs: row.ttl_ms,
      taskTypes: row.task_types,
    };
    this.remember(w);
    return w;
  }

  /** The caller's worker, which must not be offline (409 WORKER_OFFLINE: it registers again). */
  async live(p: WorkerPrincipalT, workerId: string): Promise<KnownWorker> {
    const w = await this.get(p, workerId);
    if (w.status === 'offline')
      throw conflict('WORKER_OFFLINE', `worker ${workerId} is offline (it missed its TTL or left): register again`);
    return w;
  }

  remember(w: KnownWorker): void {
    if (this.known.size >= MAX_KNOWN) this.known.delete(this.known.keys().next().value!);
    this.known.set(w.workerId, w);
  }

  /** Sets a worker's status as this process knows it (its own change, before the notification comes). */
  setStatus(workerId: string, status: KnownWorker['status']): void {
    const w = this.known.get(workerId);
    if (w) w.status = status;
  }
}
