import { Injectable } from '@nestjs/common';
import { sql } from 'kysely';
import { tenantOf, type SystemDb, type SystemTx, type TenantTx } from '../../core/database/handles';
import type { JsonObject, JsonValue } from '../plugins/plugin';
import type { SealedJson } from '../secrets/secrets.service';

/** A registered worker instance as stored. */
export interface WorkerRow {
  tenant_id: string;
  worker_id: string;
  pool: string;
  name: string;
  token_jti: string;
  task_types: Record<string, { inputSchema?: JsonObject; outputSchema?: JsonObject }>;
  cpu: string | null;
  memory_bytes: string | null;
  gpu_count: number;
  gpu_model: string | null;
  vram_bytes: string;
  models: string[];
  loaded: string[];
  labels: Record<string, string>;
  max_concurrent: number;
  cost_per_second: string;
  sdk_version: string | null;
  status: 'online' | 'draining' | 'offline';
  ttl_ms: number;
  registered_at: Date;
  last_seen_at: Date;
  offline_at: Date | null;
  held: number;
  score: number | null;
  successes: number | null;
  failures: number | null;
  violations: number | null;
  timeouts: number | null;
  tasks: number | null;
  blocked_at: Date | null;
}

/** A new worker instance. */
export interface NewWorker {
  workerId: string;
  pool: string;
  name: string;
  tokenJti: string;
  taskTypes: Record<string, { inputSchema?: JsonObject; outputSchema?: JsonObject }>;
  cpu: number | null;
  memoryBytes: number | null;
  gpuCount: number;
  gpuModel: string | null;
  vramBytes: number;
  models: string[];
  labels: Record<string, string>;
  maxConcurrent: number;
  costPerSecond: number;
  sdkVersion: string | null;
  ttlMs: number;
}

/** A task as a worker receives it, and as the engine resolves it. */
export interface TaskRow {
  tenant_id: string;
  task_id: string;
  run_id: string;
  step_id: string;
  attempt: number;
  epoch: number;
  dag_id: string;
  dag_version: number;
  pool: string;
  task_type: string;
  inputs: JsonValue | null;
  inputs_sealed: SealedJson | null;
  /** The secret values the inputs carry (a JSON array of strings, sealed), when they carry any. */
  secrets_sealed: SealedJson | null;
  traceparent: string;
  /** Set when a worker is assigned the task (its step's timeout after); null while it waits for one. */
  deadline: Date | null;
  /** While it waits for a worker: when it fails DISPATCH_TIMEOUT (the step's dispatchTimeout), if it has one. */
  dispatch_deadline: Date | null;
  status: 'pending' | 'assigned' | 'delivered' | 'succeeded' | 'failed' | 'cancelled' | 'orphaned';
  worker_id: string | null;
  delivered_at: Date | null;
  result_digest: string | null;
  worker_name: string | null;
}

/** How an open task ends. */
export interface TaskEnd {
  tenantId: string;
  taskId: string;
  status: 'succeeded' | 'failed' | 'cancelled' | 'orphaned';
  reason: string | null;
  digest: string | null;
}

/** A worker name's reputation record. */
export interface ReputationRow {
  successes: number;
  failures: number;
  violations: number;
  timeouts: number;
  tasks: number;
  score: number;
  updated_at: Date;
  blocked_at: Date | null;
}

const WORKER_COLUMNS = sql`w.tenant_id, w.worker_id, w.pool, w.name, w.token_jti, w.task_types, w.cpu, w.memory_bytes,
  w.gpu_count, w.gpu_model, w.vram_bytes, w.models, w.loaded, w.labels, w.max_concurrent, w.cost_per_second,
  w.sdk_version, w.status, w.ttl_ms, w.registered_at, w.last_seen_at, w.offline_at,
  (select count(*)::integer from worker_task h where h.tenant_id = w.tenant_id and h.worker_id = w.worker_id
    and h.status in ('assigned', 'delivered')) as held,
  r.score, r.successes, r.failures, r.violations, r.timeouts, r.tasks, r.blocked_at`;

/** What an ended task keeps of its inputs: nothing (neither the inputs nor the secrets they carried). */
const INPUTS_DROPPED = sql`inputs = null, inputs_sealed = null, secrets_sealed = null`;

/** A delivered task given back to its worker's queue: assigned to it, to be delivered again. */
const UNDELIVERED = sql`status = 'assigned', delivered_at = null`;

const TASK_COLUMNS = sql`t.tenant_id, t.task_id, t.run_id, t.step_id, t.attempt, t.epoch, t.dag_id, t.dag_version,
  t.pool, t.task_type, t.inputs, t.inputs_sealed, t.secrets_sealed, t.traceparent, t.deadline, t.dispatch_deadline, t.status,
  t.worker_id, t.delivered_at, t.result_digest, (select w.name from worker w where w.tenant_id = t.tenant_id and w.worker_id = t.worker_id) as worker_name`;

/**
 * The worker, worker_task, worker_reputation and worker_pool tables. A worker's own reads and its
 * task pulls go through its tenant's and pool's transaction (RLS); the engine's side (results,
 * sweeps, dispatch) through the system handle, naming the tenant.
 */
@Injectable()
export class WorkersRepository {
  async insertWorker(tx: TenantTx, w: NewWorker): Promise<void> {
    await sql`
      insert into worker (tenant_id, worker_id, pool, name, token_jti, task_types, cpu, memory_bytes, gpu_count,
        gpu_model, vram_bytes, models, labels, max_concurrent, cost_per_second, sdk_version, ttl_ms)
      values (${tenantOf(tx)}, ${w.workerId}, ${w.pool}, ${w.name}, ${w.tokenJti}, ${JSON.stringify(w.taskTypes)}::jsonb,
        ${w.cpu}, ${w.memoryBytes}, ${w.gpuCount}, ${w.gpuModel}, ${w.vramBytes}, ${w.models}::text[],
        ${JSON.stringify(w.labels)}::jsonb, ${w.maxConcurrent}, ${w.costPerSecond}, ${w.sdkVersion}, ${w.ttlMs})`.execute(
      tx,
    );
  }

  /** A worker of the transaction's tenant (and pool, for a worker's own transaction). */
  async findWorker(tx: TenantTx, workerId: string): Promise<WorkerRow | undefined> {
    const r = await sql<WorkerRow>`
      select ${WORKER_COLUMNS} from worker w
      left join worker_reputation r on r.tenant_id = w.tenant_id and r.pool = w.pool and r.name = w.name
      where w.tenant_id = ${tenantOf(tx)} and w.worker_id = ${workerId}`.execute(tx);
    return r.rows[0];
  }

  /** The tenant's workers, newest first; offline ones only when asked for. */
  async listWorkers(
    tx: TenantTx,
    q: { pool?: string; includeOffline: boolean; limit: number; after?: { at: string; id: string } },
  ): Promise<(WorkerRow & { at_key: string })[]> {
    const r = await sql<WorkerRow & { at_key: string }>`
      select ${WORKER_COLUMNS}, to_char(w.registered_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') as at_key
      from worker w
      left join worker_reputation r on r.tenant_id = w.tenant_id and r.pool = w.pool and r.name = w.name
      where w.tenant_id = ${tenantOf(tx)}
        and (${q.pool ?? null}::text is null or w.pool = ${q.pool ?? null})
        and (${q.includeOffline} or w.status <> 'offline')
        and (${q.after?.at ?? null}::timestamptz is null
          or (w.registered_at, w.worker_id) < (${q.after?.at ?? null}::timestamptz, ${q.after?.id ?? null}::uuid))
      order by w.registered_at desc, w.worker_id desc
      limit ${q.limit}`.execute(tx);
    return r.rows;
  }

  /** Sets a live worker's status (draining, offline); false when it is already offline or unknown. */
  async setStatus(tx: SystemTx, tenantId: string, workerId: string, status: 'draining' | 'offline'): Promise<boolean> {
    const r = await sql`
      update worker set status = ${status}, offline_at = case when ${status} = 'offline' then now() end
      where tenant_id = ${tenantId} and worker_id = ${workerId} and status <> 'offline'
        and (${status} = 'offline' or status = 'online')`.execute(tx);
    return Number(r.numAffectedRows ?? 0) > 0;
  }

  /** A tenant's workers not offline that token `jti` registered (every token's when undefined), with their token. */
  async liveWorkersOf(
    tx: SystemTx,
    tenantId: string,
    jti: string | undefined,
  ): Promise<{ worker_id: string; pool: string; token_jti: string }[]> {
    const r = await sql<{ worker_id: string; pool: string; token_jti: string }>`
      select worker_id, pool, token_jti from worker
      where tenant_id = ${tenantId} and status <> 'offline' and (${jti ?? null}::text is null or token_jti = ${jti ?? null})
      order by worker_id`.execute(tx);
    return r.rows;
  }

  /** Workers not heard from within their TTL, marked offline (at most `limit`). */
  async expireWorkers(db: SystemDb, limit: number): Promise<{ tenant_id: string; worker_id: string; pool: string }[]> {
    const r = await sql<{ tenant_id: string; worker_id: string; pool: string }>`
      update worker w set status = 'offline', offline_at = now()
      from (
        select tenant_id, worker_id from worker
        where status <> 'offline' and last_seen_at + make_interval(secs => ttl_ms::numeric / 1000) < now()
        order by tenant_id, worker_id limit ${limit} for update skip locked
      ) x
      where w.tenant_id = x.tenant_id and w.worker_id = x.worker_id
      returning w.tenant_id, w.worker_id, w.pool`.execute(db);
    return r.rows;
  }

  /**
   * Records that these workers were heard from (their tokens too), and `loaded` models where given;
   * returns each one's status (absent: unknown) and the tasks it holds that it must stop: cancelled
   * ones (recently) and ones whose step no longer waits at their epoch.
   */
  async touch(
    tx: SystemTx,
    seen: { tenantId: string; workerId: string; loaded: string[] | null; beat: boolean }[],
  ): Promise<{
    statuses: { tenant_id: string; worker_id: string; status: string; ttl_ms: number }[];
    cancels: { tenant_id: string; worker_id: string; task_id: string; reason: string }[];
  }> {
    // A liveness record lost in a crash is made again by the next heartbeat: no need to wait for its flush.
    await sql`set local synchronous_commit = off`.execute(tx);
    const tenants = seen.map((s) => s.tenantId);
    const ids = seen.map((s) => s.workerId);
    const loaded = seen.map((s) => (s.loaded === null ? null : JSON.stringify(s.loaded)));
    const statuses = await sql<{
      tenant_id: string;
      worker_id: string;
      status: string;
      ttl_ms: number;
      token_jti: string;
    }>`
      update worker w set last_seen_at = case when w.status = 'offline' then w.last_seen_at else now() end,
        loaded = coalesce(array(select jsonb_array_elements_text(x.loaded)), w.loaded)
      from (
        select k.tenant_id, k.worker_id, k.loaded from worker v
        join unnest(${tenants}::text[], ${ids}::uuid[], ${loaded}::jsonb[]) as k(tenant_id, worker_id, loaded)
          on v.tenant_id = k.tenant_id and v.worker_id = k.worker_id
        order by k.tenant_id, k.worker_id
        for update of v
      ) x
      where w.tenant_id = x.tenant_id and w.worker_id = x.worker_id
      returning w.tenant_id, w.worker_id, w.status, w.ttl_ms, w.token_jti`.execute(tx);
    if (statuses.rows.length > 0)
      await sql`
        update api_token a set last_seen_at = now()
        from (select distinct u.t, u.j from unnest(${statuses.rows.map((r) => r.tenant_id)}::text[],
          ${statuses.rows.map((r) => r.token_jti)}::uuid[]) as u(t, j) order by 1, 2) x
        where a.tenant_id = x.t and a.jti = x.j`.execute(tx);
    const beats = seen.filter((s) => s.beat);
    const cancels =
      beats.length === 0
        ? []
        : (
            await sql<{ tenant_id: string; worker_id: string; task_id: string; reason: string }>`
      select t.tenant_id, t.worker_id, t.task_id,
        coalesce(t.end_reason, case when s.status = 'cancelled' then 'cancelled' else 'step_ended' end) as reason
      from unnest(${beats.map((b) => b.tenantId)}::text[], ${beats.map((b) => b.workerId)}::uuid[]) as k(tenant_id, worker_id)
      join worker_task t on t.tenant_id = k.tenant_id and t.worker_id = k.worker_id
      left join step s on s.tenant_id = t.tenant_id and s.run_id = t.run_id and s.step_id = t.step_id
      where (t.status = 'cancelled' and t.finished_at > now() - interval '10 minutes')
        or (t.status in ('assigned', 'delivered') and (s.status is distinct from 'waiting' or s.epoch <> t.epoch))
      order by t.tenant_id, t.worker_id, t.task_id`.execute(tx)
          ).rows;
    return { statuses: statuses.rows, cancels };
  }

  /**
   * Hands the worker up to `max` of the tasks assigned to it (delivered now), oldest first. The
   * commit need not wait for its WAL flush: lost in a crash, the tasks are assigned again and handed
   * over again (a result is fenced by its epoch and idempotent); the result's commit flushes it.
   */
  async deliver(tx: TenantTx, workerId: string, max: number): Promise<TaskRow[]> {
    const tenant = tenantOf(tx);
    await sql`set local synchronous_commit = off`.execute(tx);
    const r = await sql<TaskRow>`
      with x as (
        select task_id from worker_task
        where tenant_id = ${tenant} and worker_id = ${workerId} and status = 'assigned'
        order by assigned_at, task_id limit ${max}
        for update skip locked
      ),
      t as (
        update worker_task t set status = 'delivered', delivered_at = clock_timestamp()
        from x where t.tenant_id = ${tenant} and t.task_id = x.task_id
        returning t.*
      )
      select ${TASK_COLUMNS} from t order by t.delivered_at, t.task_id`.execute(tx);
    return r.rows;
  }

  /** A task, locked for its result (the worker's pool and the task's tenant named). */
  async lockTask(tx: SystemTx, tenantId: string, pool: string, taskId: string): Promise<TaskRow | undefined> {
    const r = await sql<TaskRow>`
      select ${TASK_COLUMNS} from worker_task t
      where t.tenant_id = ${tenantId} and t.pool = ${pool} and t.task_id = ${taskId}
      for update of t`.execute(tx);
    return r.rows[0];
  }

  /** Tasks locked for their results, in key order (each under its worker's pool), by `<tenant>/<task>`. */
  async lockTasks(
    tx: SystemTx,
    keys: { tenantId: string; pool: string; taskId: string }[],
  ): Promise<Map<string, TaskRow>> {
    const r = await sql<TaskRow>`
      select ${TASK_COLUMNS} from worker_task t
      join unnest(${keys.map((k) => k.tenantId)}::text[], ${keys.map((k) => k.pool)}::text[],
        ${keys.map((k) => k.taskId)}::uuid[]) as k(tenant_id, pool, task_id)
        on t.tenant_id = k.tenant_id and t.pool = k.pool and t.task_id = k.task_id
      order by t.tenant_id, t.task_id
      for update of t`.execute(tx);
    return new Map(r.rows.map((row) => [`${row.tenant_id}/${row.task_id}`, row]));
  }

  /** Ends open tasks (their inputs dropped), in one statement. */
  async endTasks(tx: SystemTx, ends: TaskEnd[]): Promise<void> {
    if (ends.length === 0) return;
    await sql`
      update worker_task t set status = e.status, finished_at = now(), end_reason = e.reason, result_digest = e.digest,
        ${INPUTS_DROPPED}
      from unnest(${ends.map((e) => e.tenantId)}::text[], ${ends.map((e) => e.taskId)}::uuid[],
        ${ends.map((e) => e.status)}::text[], ${ends.map((e) => e.reason)}::text[], ${ends.map((e) => e.digest)}::text[])
        as e(tenant_id, task_id, status, reason, digest)
      where t.tenant_id = e.tenant_id and t.task_id = e.task_id and t.status in ('pending', 'assigned', 'delivered')`.execute(
      tx,
    );
  }

  /** Ends an open task (its inputs dropped); false when it was no longer open. */
  async endTask(
    tx: SystemTx,
    tenantId: string,
    taskId: string,
    status: 'succeeded' | 'failed' | 'cancelled' | 'orphaned',
    reason: string | null,
    digest: string | null,
  ): Promise<boolean> {
    const r = await sql`
      update worker_task set status = ${status}, finished_at = now(), end_reason = ${reason}, result_digest = ${digest},
        ${INPUTS_DROPPED}
      where tenant_id = ${tenantId} and task_id = ${taskId} and status in ('pending', 'assigned', 'delivered')`.execute(
      tx,
    );
    return Number(r.numAffectedRows ?? 0) > 0;
  }

  /** A result that came after its task ended (refused): counted on the task. */
  async countLateResult(tx: SystemTx, tenantId: string, taskId: string): Promise<void> {
    await sql`update worker_task set late_results = late_results + 1 where tenant_id = ${tenantId} and task_id = ${taskId}`.execute(
      tx,
    );
  }

  async progress(tx: SystemTx, tenantId: string, taskId: string, progress: JsonObject): Promise<void> {
    await sql`update worker_task set progress = ${JSON.stringify(progress)}::jsonb
      where tenant_id = ${tenantId} and task_id = ${taskId} and status = 'delivered'`.execute(tx);
  }

  /** How many step.progress events an attempt appended to its run. */
  async progressEvents(
    tx: SystemTx,
    tenantId: string,
    runId: string,
    stepId: string,
    attempt: number,
  ): Promise<number> {
    const r = await sql<{ n: number }>`
      select count(*)::integer as n from run_event
      where tenant_id = ${tenantId} and run_id = ${runId} and step_id = ${stepId} and attempt = ${attempt}
        and type = 'step.progress'`.execute(tx);
    return r.rows[0].n;
  }

  /**
   * The tasks a worker was handed but did not start (assigned), back to pending for another worker,
   * their timeout to run again from their next assignment.
   */
  async unassign(tx: SystemTx, tenantId: string, workerId: string): Promise<number> {
    const r = await sql`
      update worker_task set status = 'pending', worker_id = null, assigned_at = null,
        deadline = case when timeout_ms is null then deadline end
      where tenant_id = ${tenantId} and worker_id = ${workerId} and status = 'assigned'`.execute(tx);
    return Number(r.numAffectedRows ?? 0);
  }

  /** The tasks a worker holds that it started (delivered), locked. */
  async deliveredTo(tx: SystemTx, tenantId: string, workerId: string): Promise<TaskRow[]> {
    const r = await sql<TaskRow>`
      select ${TASK_COLUMNS} from worker_task t
      where t.tenant_id = ${tenantId} and t.worker_id = ${workerId} and t.status = 'delivered'
      order by t.task_id for update of t`.execute(tx);
    return r.rows;
  }

  /** Assigned or started tasks past their deadline, or pending past their dispatch deadline (at most `limit`). */
  async overdue(db: SystemDb, limit: number): Promise<{ tenant_id: string; task_id: string; pool: string }[]> {
    const r = await sql<{ tenant_id: string; task_id: string; pool: string }>`
      select tenant_id, task_id, pool from worker_task
      where status in ('pending', 'assigned', 'delivered') and deadline < now()
      union
      select tenant_id, task_id, pool from worker_task
      where status = 'pending' and dispatch_deadline < now()
      limit ${limit}`.execute(db);
    return r.rows;
  }

  /** Ends open tasks whose step no longer waits at their epoch (cancelled runs, resolved steps). */
  async cancelStale(db: SystemDb, limit: number): Promise<{ tenant_id: string; pool: string; run_id: string }[]> {
    const r = await sql<{ tenant_id: string; pool: string; run_id: string }>`
      update worker_task t set status = 'cancelled', finished_at = now(), end_reason = x.reason,
        ${INPUTS_DROPPED}
      from (
        select t.tenant_id, t.task_id, case when s.status = 'cancelled' then 'cancelled' else 'step_ended' end as reason
        from worker_task t
        left join step s on s.tenant_id = t.tenant_id and s.run_id = t.run_id and s.step_id = t.step_id
        where t.status in ('pending', 'assigned', 'delivered') and (s.status is distinct from 'waiting' or s.epoch <> t.epoch)
        limit ${limit} for update of t skip locked
      ) x
      where t.tenant_id = x.tenant_id and t.task_id = x.task_id
      returning t.tenant_id, t.pool, t.run_id`.execute(db);
    return r.rows;
  }

  /** The (tenant, pool) pairs with pending tasks. */
  async pendingPools(db: SystemDb): Promise<{ tenant_id: string; pool: string }[]> {
    const r = await sql<{ tenant_id: string; pool: string }>`
      select distinct tenant_id, pool from worker_task where status = 'pending'`.execute(db);
    return r.rows;
  }

  /**
   * The dispatch of a pool (ordo_task_dispatch), one statement and so a transaction of its own,
   * committed without waiting for its WAL flush (see there): assigns its pending tasks, then
   * delivers to the takers given (workers of the pool that can take `room` more tasks in this
   * process) their assigned tasks and returns those, each with its worker's name. `landing`: tasks
   * whose results this process holds, not yet applied; their workers' slots are free.
   */
  async dispatch(
    db: SystemDb,
    tenantId: string,
    pool: string,
    takers: { workerId: string; room: number }[] = [],
    landing: string[] = [],
  ) {
    const r = await sql<TaskRow>`
      select t.tenant_id, t.task_id, t.run_id, t.step_id, t.attempt, t.epoch, t.dag_id, t.dag_version, t.pool,
        t.task_type, t.inputs, t.inputs_sealed, t.secrets_sealed, t.traceparent, t.deadline, t.dispatch_deadline, t.status,
        t.worker_id, t.delivered_at, t.result_digest, null::text as worker_name
      from ordo_task_dispatch(${tenantId}, ${pool}, ${JSON.stringify(takers)}::jsonb, ${landing}::uuid[]) j
      cross join lateral jsonb_populate_record(null::worker_task, j) t
      order by t.delivered_at, t.task_id`.execute(db);
    return r.rows;
  }

  /** Tasks delivered to a taker that was gone before it got them: assigned again, and their workers told. */
  async undeliver(
    db: SystemDb,
    rows: { tenant_id: string; task_id: string; worker_id: string | null }[],
  ): Promise<void> {
    if (rows.length === 0) return;
    await db.transaction().execute(async (trx) => {
      await sql`set local synchronous_commit = off`.execute(trx);
      await sql`
        update worker_task t set ${UNDELIVERED}
        from unnest(${rows.map((r) => r.tenant_id)}::text[], ${rows.map((r) => r.task_id)}::uuid[]) as k(tenant_id, task_id)
        where t.tenant_id = k.tenant_id and t.task_id = k.task_id and t.status = 'delivered'`.execute(trx);
      const told = [...new Set(rows.map((r) => JSON.stringify([r.tenant_id, r.worker_id])))];
      for (const payload of told) await sql`select pg_notify('ordo_task', ${payload})`.execute(trx);
    });
  }

  /**
   * The tasks delivered to the worker that it does not hold (`holding`: the attempts it runs or is
   * posting results of): their delivery never reached it, so they are assigned to it again, oldest
   * first as before, and it is told. Returns their ids.
   */
  async redeliver(tx: TenantTx, workerId: string, holding: string[]): Promise<string[]> {
    const tenant = tenantOf(tx);
    const r = await sql<{ task_id: string }>`
      update worker_task t set ${UNDELIVERED}
      where t.tenant_id = ${tenant} and t.worker_id = ${workerId} and t.status = 'delivered'
        and t.task_id <> all (${holding}::uuid[])
      returning t.task_id`.execute(tx);
    if (r.rows.length > 0) await sql`select pg_notify('ordo_task', ${JSON.stringify([tenant, workerId])})`.execute(tx);
    return r.rows.map((x) => x.task_id).sort();
  }

  /** Wakes the dispatchers of a pool after this transaction commits. */
  async wakeDispatch(tx: SystemTx, tenantId: string, pool: string): Promise<void> {
    await sql`select pg_notify('ordo_dispatch', ${JSON.stringify([tenantId, pool])})`.execute(tx);
  }

  /**
   * A new connection of the worker: a channel opened, or a sync over HTTP (it pulls by long-poll).
   * Stamped by the database's clock in microseconds (one clock for every process, so the stamps
   * order the worker's connections), kept on the worker (see channelStamps) and told to the api
   * processes, which close any older channel of the worker; returns the stamp.
   */
  async announceConnection(db: SystemDb, tenantId: string, workerId: string): Promise<number> {
    const r = await sql<{ stamp: string }>`
      with c as (select (extract(epoch from clock_timestamp()) * 1000000)::bigint as stamp),
      kept as (
        update worker w set channel_stamp = greatest(w.channel_stamp, c.stamp) from c
        where w.tenant_id = ${tenantId} and w.worker_id = ${workerId}
      )
      select c.stamp::text as stamp,
        pg_notify('ordo_channel', json_build_array(${tenantId}::text, ${workerId}::text, c.stamp::text)::text)
      from c`.execute(db);
    return Number(r.rows[0].stamp);
  }

  /** The stamps of these workers' newest connections (see announceConnection), by tenant and worker id. */
  async channelStamps(
    db: SystemDb,
    workers: { tenantId: string; workerId: string }[],
  ): Promise<{ tenant_id: string; worker_id: string; stamp: number }[]> {
    if (workers.length === 0) return [];
    const r = await sql<{ tenant_id: string; worker_id: string; stamp: string }>`
      select w.tenant_id, w.worker_id, w.channel_stamp::text as stamp
      from unnest(${workers.map((w) => w.tenantId)}::text[], ${workers.map((w) => w.workerId)}::uuid[]) as k(tenant_id, worker_id)
      join worker w on w.tenant_id = k.tenant_id and w.worker_id = k.worker_id
      where w.channel_stamp is not null`.execute(db);
    return r.rows.map((x) => ({ tenant_id: x.tenant_id, worker_id: x.worker_id, stamp: Number(x.stamp) }));
  }

  /** Tells the api processes a worker's status changed (their caches). */
  async announceWorker(tx: SystemTx, tenantId: string, workerId: string, status: string): Promise<void> {
    await sql`select pg_notify('ordo_worker', ${JSON.stringify([tenantId, workerId, status])})`.execute(tx);
  }

  async lockReputation(tx: SystemTx, tenantId: string, pool: string, name: string): Promise<ReputationRow> {
    await sql`insert into worker_reputation (tenant_id, pool, name) values (${tenantId}, ${pool}, ${name})
      on conflict do nothing`.execute(tx);
    const r = await sql<ReputationRow>`
      select successes, failures, violations, timeouts, tasks, score, updated_at, blocked_at from worker_reputation
      where tenant_id = ${tenantId} and pool = ${pool} and name = ${name} for update`.execute(tx);
    return r.rows[0];
  }

  async saveReputation(
    tx: SystemTx,
    tenantId: string,
    pool: string,
    name: string,
    r: Omit<ReputationRow, 'updated_at' | 'blocked_at'> & { block: boolean },
  ): Promise<void> {
    await sql`
      update worker_reputation set successes = ${r.successes}, failures = ${r.failures}, violations = ${r.violations},
        timeouts = ${r.timeouts}, tasks = ${r.tasks}, score = ${r.score}, updated_at = now(),
        blocked_at = case when ${r.block} then coalesce(blocked_at, now()) else blocked_at end
      where tenant_id = ${tenantId} and pool = ${pool} and name = ${name}`.execute(tx);
  }

  /** An operator's reset of a worker name's reputation (history cleared, unblocked). */
  async resetReputation(tx: SystemTx, tenantId: string, pool: string, name: string, by: string, reason: string) {
    await sql`
      insert into worker_reputation (tenant_id, pool, name, reset_at, reset_by, reset_reason)
      values (${tenantId}, ${pool}, ${name}, now(), ${by}, ${reason})
      on conflict (tenant_id, pool, name) do update set successes = 0, failures = 0, violations = 0, timeouts = 0,
        score = 0.5, blocked_at = null, updated_at = now(), reset_at = now(), reset_by = ${by}, reset_reason = ${reason}`.execute(
      tx,
    );
  }

  async setPoolStrategy(tx: TenantTx, pool: string, strategy: string, by: string): Promise<void> {
    await sql`
      insert into worker_pool (tenant_id, pool, strategy, updated_by) values (${tenantOf(tx)}, ${pool}, ${strategy}, ${by})
      on conflict (tenant_id, pool) do update set strategy = excluded.strategy, updated_at = now(),
        updated_by = excluded.updated_by`.execute(tx);
  }

  async poolStrategy(tx: TenantTx, pool: string): Promise<string | undefined> {
    const r = await sql<{ strategy: string }>`
      select strategy from worker_pool where tenant_id = ${tenantOf(tx)} and pool = ${pool}`.execute(tx);
    return r.rows[0]?.strategy;
  }
}
