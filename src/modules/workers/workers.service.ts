import { Inject, Injectable } from '@nestjs/common';
import { randomUUID } from 'node:crypto';
import { ORDO_CONFIG } from '../../core/config/config.module';
import type { OrdoConfig } from '../../core/config/config';
import { Database } from '../../core/database/database';
import { badRequest, conflict, forbidden, notFound } from '../../core/errors/domain-error';
import { decodePageToken, encodePageToken } from '../../core/http/page-token';
import type { TenantPrincipalT, WorkerPrincipalT } from '../../core/http/request-context';
import { rootLogger } from '../../core/logging/logger';
import { TokenStatusCache } from '../auth/token-status-cache';
import type { JsonObject } from '../plugins/plugin';
import { SchemaError } from './task-schemas';
import { TasksService } from './tasks.service';
import { WorkerDirectory } from './worker-directory';
import { WorkerLiveness } from './worker-liveness';
import { parseSize } from './worker-names';
import type { HeartbeatAnswer, RegisterWorkerBody, TaskDto, WorkerDto } from './workers.dto';
import { WorkersRepository, type WorkerRow } from './workers.repository';

type PageKey = { a: string; i: string };
const isPageKey = (v: unknown): v is PageKey =>
  typeof v === 'object' &&
  v !== null &&
  typeof (v as PageKey).a === 'string' &&
  !Number.isNaN(Date.parse((v as PageKey).a)) &&
  typeof (v as PageKey).i === 'string' &&
  /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/.test((v as PageKey).i);

/**
 * External workers: registration (a worker token registers instances in its own pool), heartbeats,
 * drain and leave; the tenant's view of its workers with their reputation, an operator's reset of a
 * reputation, and a pool's dispatch strategy.
 */
@Injectable()
export class WorkersService {
  private readonly log = rootLogger().child({ component: 'workers' });

  constructor(
    @Inject(ORDO_CONFIG) private readonly config: OrdoConfig,
    private readonly db: Database,
    private readonly repo: WorkersRepository,
    private readonly directory: WorkerDirectory,
    private readonly liveness: WorkerLiveness,
    private readonly tasks: TasksService,
    private readonly statuses: TokenStatusCache,
  ) {
    // A revoked token's workers, and a disabled tenant's, are gone at once however they pull (each
    // api process hears it; taking a worker offline twice does nothing more).
    statuses.onChange((tenantId, jti) => {
      this.retireUnheld(tenantId, jti).catch((e: unknown) =>
        this.log.warn({ err: e, tenantId }, 'taking the workers of a token that stopped holding offline failed'),
      );
    });
  }

  /**
   * Takes offline the live workers of `tenantId` registered with token `jti` (with any token when
   * undefined: a tenant status change) whose token no longer holds (revoked, unknown, its tenant
   * disabled): their tasks not started go back to the pool, started ones are orphaned and retried.
   */
  private async retireUnheld(tenantId: string, jti: string | undefined): Promise<void> {
    const live = await this.db.withSystem((tx) => this.repo.liveWorkersOf(tx, tenantId, jti));
    for (const w of live) {
      const token = await this.statuses.status(tenantId, w.token_jti);
      if (token && !token.revoked && token.tenantActive) continue;
      await this.tasks.takeOffline({ tenantId, workerId: w.worker_id, pool: w.pool });
    }
  }

  /**
   * A long-poll (TasksService.next), answered with its tasks (or none) unless its token stopped
   * holding while it waited (revoked, expired, its tenant disabled): then its worker, which can no
   * longer act, is taken offline at once (these tasks, never received, go back to the pool with the
   * rest it was assigned), and the pull is refused as a new call would be (401 or 403).
   */
  async pull(
    p: WorkerPrincipalT,
    workerId: string,
    max: number,
    waitMs: number,
    request: AbortSignal,
  ): Promise<TaskDto[]> {
    const tasks = await this.tasks.next(p, workerId, max, waitMs, request);
    const refusal = await this.statuses.refusal(p.tenantId, p.jti, p.exp);
    if (!refusal) return tasks;
    const w = await this.directory.get(p, workerId);
    if (tasks.length > 0)
      await this.tasks.giveBack(
        w,
        tasks.map((t) => t.attemptId),
      );
    await this.tasks.takeOffline(w);
    throw refusal;
  }

  async register(p: WorkerPrincipalT, body: RegisterWorkerBody) {
    if (body.pool !== undefined && body.pool !== p.pool)
      throw forbidden(`this worker token is bound to pool ${p.pool}`, 'POOL_MISMATCH');
    const taskTypes: Record<string, { inputSchema?: JsonObject; outputSchema?: JsonObject }> = {};
    body.taskTypes.forEach((t, i) => {
      if (taskTypes[t.name]) throw badRequest('DUPLICATE_TASK_TYPE', `task type ${t.name} is declared twice`);
      try {
        if (t.inputSchema) this.tasks.schemas.check(`taskTypes[${i}].inputSchema`, t.inputSchema as JsonObject);
        if (t.outputSchema) this.tasks.schemas.check(`taskTypes[${i}].outputSchema`, t.outputSchema as JsonObject);
      } catch (e) {
        if (e instanceof SchemaError) throw badRequest('SCHEMA_INVALID', e.message);
        throw e;
      }
      taskTypes[t.name] = {
        ...(t.inputSchema ? { inputSchema: t.inputSchema as JsonObject } : {}),
        ...(t.outputSchema ? { outputSchema: t.outputSchema as JsonObject } : {}),
      };
    });
    const workerId = randomUUID();
    const ttlMs = this.config.ORDO_EXTERNAL_WORKER_TTL_MS;
    const r = body.resources;
    await this.db.withWorkerPool(p.tenantId, p.pool, (tx) =>
      this.repo.insertWorker(tx, {
        workerId,
        pool: p.pool,
        name: body.name,
        tokenJti: p.jti,
        taskTypes,
        cpu: r?.cpu ?? null,
        memoryBytes: r?.memory !== undefined ? parseSize(r.memory) : null,
        gpuCount: r?.gpu?.count ?? 0,
        gpuModel: r?.gpu?.model ?? null,
        vramBytes: r?.gpu?.vram !== undefined ? parseSize(r.gpu.vram) : 0,
        models: body.models ?? [],
        labels: body.labels ?? {},
        maxConcurrent: body.maxConcurrent,
        costPerSecond: body.costPerSecond,
        sdkVersion: body.sdkVersion ?? null,
        ttlMs,
      }),
    );
    this.directory.remember({
      tenantId: p.tenantId,
      workerId,
      pool: p.pool,
      name: body.name,
      tokenJti: p.jti,
      status: 'online',
      ttlMs,
      taskTypes,
    });
    this.liveness.seen(p.tenantId, workerId);
    // A new worker can take what waits in its pool.
    await this.db.withSystem((tx) => this.repo.wakeDispatch(tx, p.tenantId, p.pool));
    return {
      workerId,
      pool: p.pool,
      ttlMs,
      heartbeatIntervalMs: Math.floor(ttlMs / 3),
      longPollMs: this.config.ORDO_EXTERNAL_WORKER_LONG_POLL_MS,
    };
  }

  async heartbeat(p: WorkerPrincipalT, workerId: string, loaded: string[] | undefined): Promise<HeartbeatAnswer> {
    const w = await this.directory.get(p, workerId);
    if (w.status === 'offline') return { status: 'offline', ttlMs: w.ttlMs, cancel: [] };
    const beat = await this.liveness.beat(w.tenantId, w.workerId, loaded ?? null);
    if (beat.status !== w.status) this.directory.setStatus(w.workerId, beat.status);
    return { status: beat.status, ttlMs: w.ttlMs, cancel: beat.cancel };
  }

  /** The worker takes no new task; what it holds it finishes (tasks handed over but not started go back to the pool). */
  async drain(p: WorkerPrincipalT, workerId: string): Promise<{ status: 'draining' }> {
    const w = await this.directory.live(p, workerId);
    const changed = await this.db.withSystem(async (tx) => {
      if (!(await this.repo.setStatus(tx, w.tenantId, w.workerId, 'draining'))) return false;
      await this.repo.unassign(tx, w.tenantId, w.workerId);
      await this.repo.announceWorker(tx, w.tenantId, w.workerId, 'draining');
      await this.repo.wakeDispatch(tx, w.tenantId, w.pool);
      return true;
    });
    if (!changed && w.status !== 'draining') throw conflict('WORKER_OFFLINE', `worker ${workerId} is offline`);
    this.directory.setStatus(w.workerId, 'draining');
    return { status: 'draining' };
  }

  /** The worker leaves: offline at once, the tasks it still holds go elsewhere (see TasksService.releaseWorker). */
  async leave(p: WorkerPrincipalT, workerId: string): Promise<void> {
    await this.tasks.takeOffline(await this.directory.get(p, workerId));
  }

  async list(
    p: TenantPrincipalT,
    q: { pool?: string; includeOffline: boolean; limit: number; pageToken?: string },
  ): Promise<{ items: WorkerDto[]; nextPageToken: string | null }> {
    const after = decodePageToken(q.pageToken, isPageKey);
    const rows = await this.db.withTenant(p.tenantId, (tx) =>
      this.repo.listWorkers(tx, {
        ...(q.pool !== undefined ? { pool: q.pool } : {}),
        includeOffline: q.includeOffline,
        limit: q.limit + 1,
        ...(after ? { after: { at: after.a, id: after.i } } : {}),
      }),
    );
    const items = rows.slice(0, q.limit).map((r) => this.view(r));
    const last = rows.length > q.limit ? rows[q.limit - 1] : undefined;
    return { items, nextPageToken: last ? encodePageToken({ a: last.at_key, i: last.worker_id }) : null };
  }

  async get(p: TenantPrincipalT, workerId: string): Promise<WorkerDto> {
    const row = await this.db.withTenant(p.tenantId, (tx) => this.repo.findWorker(tx, workerId));
    if (!row) throw notFound(`worker ${workerId}`, 'WORKER_NOT_FOUND');
    return this.view(row);
  }

  /** An operator clears a worker name's reputation (it can be dispatched to again), with a reason. */
  async resetReputation(p: TenantPrincipalT, workerId: string, reason: string): Promise<WorkerDto> {
    const row = await this.db.withTenant(p.tenantId, (tx) => this.repo.findWorker(tx, workerId));
    if (!row) throw notFound(`worker ${workerId}`, 'WORKER_NOT_FOUND');
    await this.db.withSystem(async (tx) => {
      await this.repo.resetReputation(tx, p.tenantId, row.pool, row.name, p.subject, reason);
      await this.repo.wakeDispatch(tx, p.tenantId, row.pool);
    });
    return this.get(p, workerId);
  }

  async setPool(p: TenantPrincipalT, pool: string, strategy: string) {
    await this.db.withTenant(p.tenantId, (tx) => this.repo.setPoolStrategy(tx, pool, strategy, p.subject));
    await this.db.withSystem((tx) => this.repo.wakeDispatch(tx, p.tenantId, pool));
    return { pool, strategy };
  }

  async getPool(p: TenantPrincipalT, pool: string) {
    const strategy = await this.db.withTenant(p.tenantId, (tx) => this.repo.poolStrategy(tx, pool));
    // A pool without settings uses the defaults; it has no record to show.
    if (strategy === undefined) throw notFound(`settings of pool ${pool}`, 'POOL_NOT_FOUND');
    return { pool, strategy };
  }

  private view(r: WorkerRow): WorkerDto {
    return {
      workerId: r.worker_id,
      name: r.name,
      pool: r.pool,
      status: r.status,
      taskTypes: Object.keys(r.task_types).sort(),
      resources: {
        cpu: r.cpu === null ? null : Number(r.cpu),
        memoryBytes: r.memory_bytes === null ? null : Number(r.memory_bytes),
        gpu: { count: r.gpu_count, model: r.gpu_model, vramBytes: Number(r.vram_bytes) },
      },
      models: r.models,
      loaded: r.loaded,
      labels: r.labels,
      maxConcurrent: r.max_concurrent,
      held: r.held,
      costPerSecond: Number(r.cost_per_second),
      sdkVersion: r.sdk_version,
      registeredAt: r.registered_at.toISOString(),
      lastSeenAt: r.last_seen_at.toISOString(),
      offlineAt: r.offline_at?.toISOString() ?? null,
      reputation: {
        score: r.score ?? 0.5,
        tasks: r.tasks ?? 0,
        violations: r.violations ?? 0,
        timeouts: r.timeouts ?? 0,
        blocked: r.blocked_at !== null,
      },
    };
  }
}
