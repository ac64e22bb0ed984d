import { Injectable, Logger, type OnApplicationBootstrap, type OnApplicationShutdown } from '@nestjs/common';
import { Database } from '../../core/database/database';
import { PgListener } from '../../core/database/pg-listener';
import { metrics } from '../../core/telemetry/metrics';
import { EngineStore } from '../engine/engine.store';
import { WorkersRepository, type TaskRow } from './workers.repository';

/** Who hears a worker's wake-ups in this process: its long-polls and its channel. */
export interface InboxListener {
  /** A task may be assigned to the worker. */
  task(): void;
  /** A run was cancelled: the worker's tasks of it stop. */
  cancelled?(runId: string): void;
  /** The worker's status changed (draining, offline). */
  status?(status: string): void;
}

/**
 * A worker's channel or waiting long-poll in this process, to which a dispatch here delivers the
 * tasks it assigns (see TaskInbox.dispatch): it reserves its room before the dispatch and is
 * handed what was delivered to it after.
 */
export interface TaskTaker {
  readonly tenantId: string;
  readonly pool: string;
  readonly workerId: string;
  /** Reserves the tasks it can take now (0: none), held for it until `settle`. */
  reserve(): number;
  /** The tasks delivered for its reservation of `reserved`; false when it is gone (they go back). */
  settle(rows: TaskRow[], reserved: number): boolean;
}

/** A worker's (or a pool's) key in this process's maps: its tenant and id. */
export const workerKey = (tenantId: string, id: string) => `${tenantId}\u0000${id}`;

/**
 * The wake-ups of external workers in an api process, from one LISTEN connection: `ordo_task`
 * (a task was assigned to a worker), `ordo_dispatch` (a pool has pending tasks: this process
 * runs its dispatch, ordo_task_dispatch, one at a time per pool, again if woken meanwhile),
 * `ordo_worker` (a worker's status changed), `ordo_cancel` (a run was cancelled) and
 * `ordo_channel` (a worker's newer connection: a channel opened in some api process, or a sync over
 * HTTP). It also knows
 * which workers surely have nothing assigned (a pull found nothing and no wake-up came since, while
 * the connection listened): their next pull waits without a query, so idle long-polls cost none.
 * A dispatch run here delivers at once to the workers of the pool that wait here with room (their
 * takers), in its own statement: their tasks need no pull of their own.
 */
@Injectable()
export class TaskInbox implements OnApplicationBootstrap, OnApplicationShutdown {
  private readonly log = new Logger('workers');
  private readonly listeners = new Map<string, Set<InboxListener>>();
  /** Workers known to have nothing assigned (see above). */
  private readonly idle = new Set<string>();
  /** Wake-ups per worker, to tell whether one came while a pull ran. */
  private readonly wakes = new Map<string, number>();
  private readonly dispatching = new Map<string, Promise<void>>();
  /** Pools whose dispatch here is asked for and has not begun: a request joins it. */
  private readonly starting = new Set<string>();
  private readonly again = new Set<string>();
  /** Takers by tenant and pool. */
  private readonly takers = new Map<string, Set<TaskTaker>>();
  /** Tasks whose results this process holds, not yet applied, by tenant and pool (with how many). */
  private readonly landing = new Map<string, Map<string, number>>();
  private readonly listener: PgListener;
  private readonly statusHooks: ((tenantId: string, workerId: string, status: string) => void)[] = [];
  private readonly channelHooks: ((tenantId: string, workerId: string, stamp: number) => void)[] = [];
  private readonly listeningHooks: (() => void)[] = [];
  private stopping = false;

  constructor(
    private readonly db: Database,
    private readonly repo: WorkersRepository,
    store: EngineStore,
  ) {
    // The tasks this process's engine statements open are dispatched here after their commit,
    // instead of waking every api process (and this one) to dispatch them.
    store.answerHere('ordo_dispatch', (payload) => !this.stopping && this.dispatchWoken(payload));
    this.listener = new PgListener({
      url: db.urls.system,
      applicationName: 'ordo:workers-listen',
      channels: ['ordo_task', 'ordo_dispatch', 'ordo_worker', 'ordo_cancel', 'ordo_channel'],
      onNotification: (channel, payload) => this.notified(channel, payload),
      // Wake-ups may have been missed while no connection listened: every worker may have work,
      // and any of its channels may have been replaced.
      onConnected: () => {
        this.forgetIdle();
        for (const h of this.listeningHooks) h();
      },
      onLost: () => this.forgetIdle(),
      log: this.log,
    });
  }

  async onApplicationBootstrap(): Promise<void> {
    await this.listener.start();
  }

  async onApplicationShutdown(): Promise<void> {
    this.stopping = true;
    await this.listener.stop();
    await Promise.allSettled([...this.dispatching.values()]);
  }

  /** Hears `workerId`'s wake-ups until the returned function is called. */
  subscribe(tenantId: string, workerId: string, l: InboxListener): () => void {
    const k = workerKey(tenantId, workerId);
    let set = this.listeners.get(k);
    if (!set) this.listeners.set(k, (set = new Set()));
    set.add(l);
    return () => {
      set.delete(l);
      if (set.size === 0) this.listeners.delete(k);
    };
  }

  /** Offers `t` the tasks dispatched here for its worker until the returned function is called. */
  addTaker(t: TaskTaker): () => void {
    const k = workerKey(t.tenantId, t.pool);
    let set = this.takers.get(k);
    if (!set) this.takers.set(k, (set = new Set()));
    set.add(t);
    return () => {
      set.delete(t);
      if (set.size === 0) this.takers.delete(k);
    };
  }

  /**
   * A result for `taskId` is in this process's hands until the returned function is called: the
   * dispatches here count its worker's slot as free (its handler has ended) while the result waits
   * for its transaction.
   */
  landed(tenantId: string, pool: string, taskId: string): () => void {
    const k = workerKey(tenantId, pool);
    let ids = this.landing.get(k);
    if (!ids) this.landing.set(k, (ids = new Map()));
    ids.set(taskId, (ids.get(taskId) ?? 0) + 1);
    let done = false;
    return () => {
      if (done) return;
      done = true;
      const n = ids.get(taskId)! - 1;
      if (n > 0) ids.set(taskId, n);
      else ids.delete(taskId);
      if (ids.size === 0 && this.landing.get(k) === ids) this.landing.delete(k);
    };
  }

  /** Calls `hook` with every worker status change announced (ordo_worker). */
  onStatus(hook: (tenantId: string, workerId: string, status: string) => void): void {
    this.statusHooks.push(hook);
  }

  /** Calls `hook` with every newer connection of a worker, from any api process (ordo_channel, with its stamp). */
  onChannel(hook: (tenantId: string, workerId: string, stamp: number) => void): void {
    this.channelHooks.push(hook);
  }

  /**
   * Calls `hook` each time the listening connection is made (again): the notifications sent while
   * none listened, `ordo_channel` among them, were not heard.
   */
  onListening(hook: () => void): void {
    this.listeningHooks.push(hook);
  }

  /** Whether a pull for the worker needs a query (it may have a task assigned). */
  mayHaveWork(tenantId: string, workerId: string): boolean {
    return !this.idle.has(workerKey(tenantId, workerId));
  }

  /** A mark to pass to `foundNothing` after a pull that found nothing. */
  mark(tenantId: string, workerId: string): number {
    return this.wakes.get(workerKey(tenantId, workerId)) ?? 0;
  }

  /** A pull that started at `mark` found nothing: unless a wake-up came since, the worker is idle. */
  foundNothing(tenantId: string, workerId: string, mark: number): void {
    const k = workerKey(tenantId, workerId);
    if (this.listener.connected && (this.wakes.get(k) ?? 0) === mark) this.idle.add(k);
  }

  /** The worker is gone from this process's view (offline): its state is dropped. */
  forget(tenantId: string, workerId: string): void {
    const k = workerKey(tenantId, workerId);
    this.idle.delete(k);
    this.wakes.delete(k);
  }

  /**
   * Runs the dispatch of a pool in this process, delivering to the pool's takers here what it
   * assigns to their workers. Coalesced: a request made before the dispatch begins (at the end of
   * this turn of the event loop, so the requests of one commit make one dispatch) joins it; one
   * made while it runs has it run once more.
   */
  dispatch(tenantId: string, pool: string): Promise<void> {
    const k = workerKey(tenantId, pool);
    const running = this.dispatching.get(k);
    if (running) {
      if (!this.starting.has(k)) this.again.add(k);
      return running;
    }
    this.starting.add(k);
    const run = (async () => {
      await new Promise((go) => setImmediate(go));
      this.starting.delete(k);
      do {
        this.again.delete(k);
        try {
          metrics.taskDispatchesTotal.inc({ by: 'wake-up' });
          await this.dispatchOnce(tenantId, pool);
        } catch (e) {
          // The scheduler's sweep dispatches every pool with pending tasks: nothing waits forever.
          if (!this.stopping) this.log.warn({ err: e, tenantId, pool }, 'dispatch failed');
          break;
        }
      } while (this.again.has(k) && !this.stopping);
    })().finally(() => this.dispatching.delete(k));
    this.dispatching.set(k, run);
    return run;
  }

  private async dispatchOnce(tenantId: string, pool: string): Promise<void> {
    const reserved: { t: TaskTaker; n: number }[] = [];
    const room = new Map<string, number>();
    for (const t of this.takers.get(workerKey(tenantId, pool)) ?? []) {
      const n = t.reserve();
      if (n <= 0) continue;
      reserved.push({ t, n });
      room.set(t.workerId, (room.get(t.workerId) ?? 0) + n);
    }
    let rows: TaskRow[] = [];
    try {
      rows = await this.repo.dispatch(
        this.db.system,
        tenantId,
        pool,
        [...room].map(([workerId, n]) => ({ workerId, room: n })),
        [...(this.landing.get(workerKey(tenantId, pool))?.keys() ?? [])],
      );
    } finally {
      // Each taker gets its worker's tasks, in delivery order, up to what it reserved.
      const byWorker = new Map<string, TaskRow[]>();
      for (const r of rows) {
        const mine = byWorker.get(r.worker_id!);
        if (mine) mine.push(r);
        else byWorker.set(r.worker_id!, [r]);
      }
      const back: TaskRow[] = [];
      for (const { t, n } of reserved) {
        const mine = byWorker.get(t.workerId) ?? [];
        const given = mine.splice(0, n);
        if (!t.settle(given, n)) back.push(...given);
      }
      for (const left of byWorker.values()) back.push(...left);
      if (back.length > 0) await this.repo.undeliver(this.db.system, back);
    }
  }

  /** A pool's dispatch wake-up (`[tenant, pool]`): its dispatch here. False for a payload that names none. */
  private dispatchWoken(payload: string): boolean {
    const keys = keysOf(payload);
    if (!keys || keys.length < 2) return false;
    void this.dispatch(keys[0], keys[1]);
    return true;
  }

  private forgetIdle(): void {
    this.idle.clear();
    for (const set of this.listeners.values()) for (const l of set) l.task();
  }

  private notified(channel: string, payload: string): void {
    if (channel === 'ordo_cancel') {
      // (Its payload is a run id, not JSON.)
      if (payload) this.cancelled(payload);
      return;
    }
    if (channel === 'ordo_dispatch') {
      this.dispatchWoken(payload);
      return;
    }
    const keys = keysOf(payload);
    if (!keys) return;
    const [tenantId, id, status] = keys;
    if (channel === 'ordo_channel') {
      const stamp = Number(status);
      if (Number.isSafeInteger(stamp)) for (const h of this.channelHooks) h(tenantId, id, stamp);
      return;
    }
    const k = workerKey(tenantId, id);
    if (channel === 'ordo_task') {
      this.idle.delete(k);
      this.wakes.set(k, (this.wakes.get(k) ?? 0) + 1);
      for (const l of this.listeners.get(k) ?? []) l.task();
    } else if (channel === 'ordo_worker') {
      this.idle.delete(k);
      for (const h of this.statusHooks) h(tenantId, id, status);
      for (const l of this.listeners.get(k) ?? []) l.status?.(status);
    }
  }

  /** A run was cancelled (ordo_cancel carries its id as is): every listener hears it. */
  private cancelled(runId: string): void {
    for (const set of this.listeners.values()) for (const l of set) l.cancelled?.(runId);
  }
}

/** The keys a wake-up's payload carries (a JSON array of strings), or null. */
function keysOf(payload: string): string[] | null {
  let p: unknown;
  try {
    p = JSON.parse(payload);
  } catch {
    return null;
  }
  return Array.isArray(p) && p.every((x) => typeof x === 'string') ? p : null;
}
