import { Injectable } from '@nestjs/common';
import { sql, type Transaction } from 'kysely';
import type { DB } from '../../core/database/db.generated';
import { publishesCounts } from '../../core/database/prepared';
import {
  isTenantStatement,
  tenantOf,
  type SystemTx,
  type TenantStatement,
  type TenantTx,
} from '../../core/database/handles';
import type { QuotaRefusal } from '../plans/quota-exceeded';
import type { JsonValue } from '../plugins/plugin';
import type { ChainedEvent } from './run-events';
import type { PlannedStep, QueuedStep } from './run-plan';

type AnyTx = TenantTx | SystemTx;
const asTrx = (tx: AnyTx) => tx as unknown as Transaction<DB>;

export interface NewRun {
  runId: string;
  dagId: string;
  dagVersion: number;
  contentHash: string;
  runToken: string;
  inputs: JsonValue;
  inputsHash: string;
  status: 'scheduled' | 'queued' | 'succeeded' | 'cancelled';
  reason: string | null;
  traceId: string;
  requestedBy: string;
  replayOf: string | null;
  rerunOf: string | null;
  rerunFromStep: string | null;
  /** The run and `dag` step that started this run as its child, and how deep it is (0: not a child). */
  parentRunId: string | null;
  parentStepId: string | null;
  depth: number;
  admitted: boolean;
  stepsTotal: number;
  stepsRemaining: number;
  eventSeq: number;
  eventHash: string;
  finished: boolean;
  priority: number;
  /** A scheduled run is started then (job ordo.engine.start_run). */
  notBefore: Date | null;
}

/** A run already created under a run token that a create request repeated. */
export interface ExistingRun {
  run_id: string;
  dag_id: string;
  run_token: string;
  inputs_hash: string;
  status: string;
  trace_id: string;
}

/** The run row's bookkeeping columns, locked for the rest of a transaction. */
export interface RunBookRow {
  tenant_id: string;
  run_id: string;
  dag_id: string;
  dag_version: number;
  status: string;
  trace_id: string;
  event_seq: number;
  event_hash: string;
  dispatch_count: number;
  steps_remaining: number;
  steps_failed: number;
  started_at: Date | null;
}

export interface RunBookUpdate {
  tenantId: string;
  runId: string;
  status: string;
  eventSeq: number;
  eventHash: string;
  dispatchCount: number;
  stepsRemaining: number;
  stepsFailed: number;
  started: boolean;
  finished: boolean;
  reason: string | null;
  outputsHash: string | null;
}

export interface RunRow {
  run_id: string;
  dag_id: string;
  dag_version: number;
  content_hash: string;
  run_token: string;
  inputs: unknown;
  inputs_hash: string;
  status: string;
  reason: string | null;
  trace_id: string;
  requested_by: string;
  replay_of: string | null;
  rerun_of: string | null;
  rerun_from_step: string | null;
  priority: number;
  not_before: Date | null;
  parent_run_id: string | null;
  parent_step_id: string | null;
  depth: number;
  created_at: Date;
  started_at: Date | null;
  finished_at: Date | null;
  steps_total: number;
  steps_remaining: number;
  event_seq: number;
  event_hash: string;
  outputs_hash: string | null;
}

const RUN_COLUMNS = [
  'run_id',
  'dag_id',
  'dag_version',
  'content_hash',
  'run_token',
  'inputs',
  'inputs_hash',
  'status',
  'reason',
  'trace_id',
  'requested_by',
  'replay_of',
  'rerun_of',
  'rerun_from_step',
  'priority',
  'not_before',
  'parent_run_id',
  'parent_step_id',
  'depth',
  'created_at',
  'started_at',
  'finished_at',
  'steps_total',
  'steps_remaining',
  'event_seq',
  'event_hash',
  'outputs_hash',
] as const;

export interface StepRow {
  step_id: string;
  status: string;
  reason: string | null;
  plugin: string;
  depends_on: string[];
  topo_index: number;
  dispatch_seq: number | null;
  attempts: number;
  epoch: number;
  named_status: string | null;
  outputs: unknown;
  outputs_hash: string | null;
  logs_hash: string | null;
  error: unknown;
  from_rerun: boolean;
  queued_at: Date | null;
  started_at: Date | null;
  finished_at: Date | null;
}

/** Runs, steps, attempts and events. Request methods take a tenant transaction; shared writers take either handle. */
@Injectable()
export class RunsRepository {
  async findByTokens(tx: TenantTx, dagId: string, tokens: string[]): Promise<RunRow[]> {
    if (tokens.length === 0) return [];
    return tx
      .selectFrom('run')
      .select(RUN_COLUMNS)
      .where('tenant_id', '=', tenantOf(tx))
      .where('dag_id', '=', dagId)
      .where('run_token', 'in', tokens)
      .execute();
  }

  /**
   * Writes created runs in one statement (db/functions/ordo_create_runs.sql): the
   * runs (skipping (tenant, dag, runToken) duplicates), and only for those inserted their steps,
   * chained events and ready queue items (in the given order), the tenant's queue row and the
   * workers' wake-up (ordo_ready). On a TenantStatement the statement is its own transaction; in a
   * TenantTx it is part of it. Writes nothing and names the DAGs whose version is no longer the one
   * to use (disabled, or no longer the latest active one where `latest`) when there are any. Runs
   * refused by the tenant's plan's quotas are not written and come back in `refused`.
   */
  async createRuns(
    h: TenantTx | TenantStatement,
    w: {
      versions: { dagId: string; version: number; latest: boolean }[];
      runs: NewRun[];
      steps: (PlannedStep & { runId: string })[];
      events: ChainedEvent[];
      queue: QueuedStep[];
    },
  ): Promise<{ created: Set<string>; existing: ExistingRun[]; stale: string[]; refused: Map<string, QuotaRefusal> }> {
    const tenant = isTenantStatement(h) ? h.tenantId : tenantOf(h);
    const input = JSON.stringify({
      tenant,
      now: new Date(),
      versions: w.versions.map((v) => ({ d: v.dagId, v: v.version, latest: v.latest })),
      runs: w.runs.map((r) => ({
        run_id: r.runId,
        dag_id: r.dagId,
        dag_version: r.dagVersion,
        content_hash: r.contentHash,
        run_token: r.runToken,
        inputs: r.inputs,
        inputs_hash: r.inputsHash,
        status: r.status,
        reason: r.reason,
        trace_id: r.traceId,
        requested_by: r.requestedBy,
        replay_of: r.replayOf,
        rerun_of: r.rerunOf,
        rerun_from_step: r.rerunFromStep,
        parent_run_id: r.parentRunId,
        parent_step_id: r.parentStepId,
        depth: r.depth,
        admitted: r.admitted,
        steps_total: r.stepsTotal,
        steps_remaining: r.stepsRemaining,
        event_seq: r.eventSeq,
        event_hash: r.eventHash,
        finished: r.finished,
        priority: r.priority,
        not_before: r.notBefore,
      })),
      steps: w.steps.map((s) => ({
        run_id: s.runId,
        step_id: s.stepId,
        status: s.status,
        reason: s.reason,
        plugin: s.plugin,
        config: s.config,
        spec: s.spec,
        deps: s.dependsOn,
        topo_index: s.topoIndex,
        pending_deps: s.pendingDeps,
        from_rerun: s.fromRerun,
        outputs: s.outputs,
        outputs_hash: s.outputsHash,
      })),
      events: w.events.map((e) => ({
        run_id: e.runId,
        seq: e.seq,
        created_at: e.createdAt,
        type: e.type,
        step_id: e.stepId,
        attempt: e.attempt,
        actor: e.actor,
        data: e.data,
        prev_hash: e.prevHash,
        hash: e.hash,
      })),
      queue: w.queue.map((q) => ({ run_id: q.runId, step_id: q.stepId })),
      // A batch the engine's plans are re-made for: its rows reach the statistics at once (PlanRefresh).
      publishCounts: publishesCounts(w.runs.length),
    });
    const statement = sql<{ kind: 'created' | 'existing' | 'stale' | 'quota'; item: unknown }>`
      select kind, item from ordo_create_runs(${input}::jsonb)`;
    const { rows } = await statement.execute(isTenantStatement(h) ? h.db : asTrx(h));
    const out = {
      created: new Set<string>(),
      existing: [] as ExistingRun[],
      stale: [] as string[],
      refused: new Map<string, QuotaRefusal>(),
    };
    for (const r of rows) {
      if (r.kind === 'created') out.created.add((r.item as { run_id: string }).run_id);
      else if (r.kind === 'existing') out.existing.push(r.item as ExistingRun);
      else if (r.kind === 'quota') {
        const q = r.item as QuotaRefusal & { run_id: string };
        out.refused.set(q.run_id, { limit: q.limit, value: Number(q.value), current: Number(q.current) });
      } else out.stale.push(r.item as string);
    }
    return out;
  }

  /** Appends chained events (numbers and hashes already computed under the runs' row locks). */
  async insertEvents(tx: AnyTx, events: ChainedEvent[]): Promise<void> {
    if (events.length === 0) return;
    await sql`${eventsInsert(events)}`.execute(asTrx(tx));
  }

  /**
   * Locks runs (in key order, so concurrent lockers cannot deadlock on them) and returns their
   * bookkeeping. With `skipLocked`, runs another transaction holds are left out instead of waited for.
   */
  async lockRuns(
    tx: AnyTx,
    keys: { tenantId: string; runId: string }[],
    opts: { skipLocked?: boolean } = {},
  ): Promise<RunBookRow[]> {
    if (keys.length === 0) return [];
    const r = await sql<RunBookRow>`
      select r.tenant_id, r.run_id, r.dag_id, r.dag_version, r.status, r.trace_id, r.event_seq, r.event_hash, r.dispatch_count,
        r.steps_remaining, r.steps_failed, r.started_at
      from run r
      join unnest(${keys.map((k) => k.tenantId)}::text[], ${keys.map((k) => k.runId)}::uuid[]) as k(tenant_id, run_id)
        on r.tenant_id = k.tenant_id and r.run_id = k.run_id
      order by r.tenant_id, r.run_id
      for update of r ${opts.skipLocked ? sql`skip locked` : sql``}`.execute(asTrx(tx));
    return r.rows;
  }

  /** Writes back the bookkeeping of locked runs in one statement. */
  async updateRunBooks(tx: AnyTx, books: RunBookUpdate[]): Promise<void> {
    if (books.length === 0) return;
    await sql`${runBooksUpdate(books)}`.execute(asTrx(tx));
  }

  // ---- request reads ----

  async findRun(tx: TenantTx, runId: string): Promise<RunRow | undefined> {
    return tx
      .selectFrom('run')
      .select(RUN_COLUMNS)
      .where('tenant_id', '=', tenantOf(tx))
      .where('run_id', '=', runId)
      .executeTakeFirst();
  }

  async listRuns(
    tx: TenantTx,
    q: { limit: number; dagId?: string; status?: string; from?: Date; to?: Date; after?: { t: string; id: string } },
  ): Promise<RunRow[]> {
    let query = tx.selectFrom('run').select(RUN_COLUMNS).where('tenant_id', '=', tenantOf(tx));
    if (q.dagId !== undefined) query = query.where('dag_id', '=', q.dagId);
    if (q.status !== undefined) query = query.where('status', '=', q.status);
    if (q.from !== undefined) query = query.where('created_at', '>=', q.from);
    if (q.to !== undefined) query = query.where('created_at', '<', q.to);
    const after = q.after;
    if (after !== undefined) {
      query = query.where((eb) =>
        eb.or([
          eb('created_at', '<', new Date(after.t)),
          eb.and([eb('created_at', '=', new Date(after.t)), eb('run_id', '<', after.id)]),
        ]),
      );
    }
    return query.orderBy('created_at', 'desc').orderBy('run_id', 'desc').limit(q.limit).execute();
  }

  async listSteps(tx: TenantTx, runId: string): Promise<StepRow[]> {
    return tx
      .selectFrom('step')
      .select([
        'step_id',
        'status',
        'reason',
        'plugin',
        'depends_on',
        'topo_index',
        'dispatch_seq',
        'attempts',
        'epoch',
        'named_status',
        'outputs',
        'outputs_hash',
        'logs_hash',
        'error',
        'from_rerun',
        'queued_at',
        'started_at',
        'finished_at',
      ])
      .where('tenant_id', '=', tenantOf(tx))
      .where('run_id', '=', runId)
      .orderBy('topo_index')
      .execute();
  }

  async listAttempts(tx: TenantTx, runId: string, stepId: string) {
    return tx
      .selectFrom('attempt')
      .selectAll()
      .where('tenant_id', '=', tenantOf(tx))
      .where('run_id', '=', runId)
      .where('step_id', '=', stepId)
      .orderBy('attempt')
      .execute();
  }

  /** Every attempt of a run's steps, by step then attempt (the run's steps are read unpaged too). */
  async listRunAttempts(tx: TenantTx, runId: string) {
    return tx
      .selectFrom('attempt')
      .selectAll()
      .where('tenant_id', '=', tenantOf(tx))
      .where('run_id', '=', runId)
      .orderBy('step_id')
      .orderBy('attempt')
      .execute();
  }

  /** Whether the tenant has this run; its row is not read. */
  async runExists(tx: TenantTx, runId: string): Promise<boolean> {
    const row = await tx
      .selectFrom('run')
      .select(sql<number>`1`.as('found'))
      .where('tenant_id', '=', tenantOf(tx))
      .where('run_id', '=', runId)
      .executeTakeFirst();
    return row !== undefined;
  }

  /**
   * A run's events after `afterSeq`, in order. `created_utc` is written by PostgreSQL in the form
   * the chain hashes (ISO 8601 in UTC to the millisecond, as toISOString writes it), so a page of
   * events is not parsed into dates and written back.
   */
  async listEvents(tx: TenantTx, runId: string, afterSeq: number, limit: number) {
    return tx
      .selectFrom('run_event')
      .select([
        'seq',
        sql<string>`to_char(created_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')`.as('created_utc'),
        'type',
        'step_id',
        'attempt',
        'actor',
        'data',
        'prev_hash',
        'hash',
      ])
      .where('tenant_id', '=', tenantOf(tx))
      .where('run_id', '=', runId)
      .where('seq', '>', afterSeq)
      .orderBy('seq')
      .limit(limit)
      .execute();
  }

  // ---- cancel ----

  /**
   * Moves every not-yet-terminal step of a run to cancelled; returns their ids and former states.
   * A waiting step's attempt, which no worker holds, ends cancelled with it.
   */
  async cancelSteps(tx: TenantTx, runId: string): Promise<{ step_id: string; old: string }[]> {
    const r = await sql<{ step_id: string; old: string }>`
      with c as (
        update step s set status = 'cancelled', reason = 'cancelled', finished_at = now()
        from step o
        where s.tenant_id = ${tenantOf(tx)} and s.run_id = ${runId}
          and o.tenant_id = s.tenant_id and o.run_id = s.run_id and o.step_id = s.step_id
          and s.status in ('pending', 'queued', 'running', 'waiting', 'retrying', 'orphaned')
        returning s.step_id, s.epoch, o.status as old
      ),
      a as (
        update attempt a set status = 'cancelled', terminated_at = now()
        from c
        where a.tenant_id = ${tenantOf(tx)} and a.run_id = ${runId} and a.step_id = c.step_id
          and a.epoch = c.epoch and a.status = 'running' and c.old = 'waiting'
      )
      select c.step_id, c.old from c`.execute(asTrx(tx));
    return r.rows;
  }

  /**
   * The not-yet-ended runs started by `dag` steps of the run, of their children, and so on (parents
   * before children), for a cancel to reach them all.
   */
  async openDescendants(tx: TenantTx, runId: string): Promise<string[]> {
    const r = await sql<{ run_id: string }>`
      with recursive d as (
        select c.run_id, c.status, 1 as depth from run c
        where c.tenant_id = ${tenantOf(tx)} and c.parent_run_id = ${runId}
        union all
        select c.run_id, c.status, d.depth + 1 from run c join d on c.parent_run_id = d.run_id
        where c.tenant_id = ${tenantOf(tx)}
      )
      select run_id from d where status in ('queued', 'running') order by depth, run_id`.execute(asTrx(tx));
    return r.rows.map((x) => x.run_id);
  }

  /** The child run each `dag` step of the run started (by step id). */
  /** The latest task of each queue step of a run (its external worker, why it waits, its progress). */
  async queueTasks(tx: TenantTx, runId: string) {
    const r = await sql<{
      step_id: string;
      task_id: string;
      status: string;
      pool: string;
      task_type: string;
      wait_reason: string | null;
      worker_id: string | null;
      worker_name: string | null;
      progress: unknown;
    }>`
      select distinct on (t.step_id) t.step_id, t.task_id, t.status, t.pool, t.task_type,
        case when t.status = 'pending' then ordo_task_wait_reason(t.tenant_id, t.pool, t.task_type, t.requires) end
          as wait_reason,
        t.worker_id,
        w.name as worker_name, t.progress
      from worker_task t
      left join worker w on w.tenant_id = t.tenant_id and w.worker_id = t.worker_id
      where t.tenant_id = ${tenantOf(tx)} and t.run_id = ${runId}
      order by t.step_id, t.attempt desc`.execute(tx);
    return new Map(r.rows.map((row) => [row.step_id, row]));
  }

  async childRuns(tx: TenantTx, runId: string): Promise<Map<string, string>> {
    const rows = await tx
      .selectFrom('run')
      .select(['parent_step_id', 'run_id'])
      .where('tenant_id', '=', tenantOf(tx))
      .where('parent_run_id', '=', runId)
      .execute();
    return new Map(rows.map((r) => [r.parent_step_id!, r.run_id]));
  }

  /**
   * Tells the parents of these ended runs (children of `dag` steps) that they ended: an
   * `ordo.engine.child_ended` job each (graphile-worker's tables take the system handle).
   */
  async notifyParents(tx: SystemTx, tenantId: string, runIds: string[]): Promise<void> {
    if (runIds.length === 0) return;
    await sql`
      select graphile_worker.add_job('ordo.engine.child_ended',
        json_build_object('tenantId', r.tenant_id, 'runId', r.parent_run_id, 'stepId', r.parent_step_id,
          'childRunId', r.run_id),
        job_key => 'child:' || r.tenant_id || ':' || r.run_id, max_attempts => 25)
      from run r
      where r.tenant_id = ${tenantId} and r.run_id = any(${runIds}::uuid[]) and r.parent_run_id is not null`.execute(
      asTrx(tx),
    );
  }

  /** Removes a run's ready (not leased) queue items; leased ones leave when their worker reports. */
  async dequeueReady(tx: TenantTx, runId: string): Promise<void> {
    await sql`
      delete from queue_item where tenant_id = ${tenantOf(tx)} and id in (
        select id from queue_item where tenant_id = ${tenantOf(tx)} and run_id = ${runId} and state = 'ready'
        for update skip locked)`.execute(asTrx(tx));
    await sql`select pg_notify('ordo_cancel', ${runId})`.execute(asTrx(tx));
  }

  /** Succeeded steps of a run with their outputs (for reruns). */
  async succeededOutputs(
    tx: TenantTx,
    runId: string,
  ): Promise<{ step_id: string; outputs: unknown; outputs_hash: string | null }[]> {
    return tx
      .selectFrom('step')
      .select(['step_id', 'outputs', 'outputs_hash'])
      .where('tenant_id', '=', tenantOf(tx))
      .where('run_id', '=', runId)
      .where('status', '=', 'succeeded')
      .execute();
  }

  /** DAGs (of the given runs) that have runs waiting for a maxConcurrentRuns slot, locked (advisory, in key order). */
  /**
   * Runs waiting for a maxConcurrentRuns slot of the DAGs of `ended` start now, as many as the
   * limits leave room for (db/functions/ordo_admit_waiting.sql, as the engine does when runs end).
   */
  async admitWaiting(tx: AnyTx, ended: { tenantId: string; runId: string; dagId: string }[]): Promise<void> {
    if (ended.length === 0) return;
    await sql`
      select ordo_admit_waiting(array(
        select row(u.tenant_id, u.run_id, u.dag_id, null)::ordo_adv_ending
        from unnest(${ended.map((e) => e.tenantId)}::text[], ${ended.map((e) => e.runId)}::uuid[],
          ${ended.map((e) => e.dagId)}::text[]) as u(tenant_id, run_id, dag_id)
      ), date_trunc('milliseconds', now()))`.execute(asTrx(tx));
  }

  async countActiveRuns(tx: TenantTx, dagId: string): Promise<number> {
    await sql`select pg_advisory_xact_lock(hashtext(${tenantOf(tx)} || '/' || ${dagId}))`.execute(asTrx(tx));
    const r = await tx
      .selectFrom('run')
      .select((eb) => eb.fn.countAll<number>().as('n'))
      .where('tenant_id', '=', tenantOf(tx))
      .where('dag_id', '=', dagId)
      .where('status', 'in', ['queued', 'running'])
      .where('admitted', '=', true)
      .executeTakeFirstOrThrow();
    return Number(r.n);
  }
}

function eventsInsert(events: ChainedEvent[]) {
  return sql`
    insert into run_event (tenant_id, run_id, seq, created_at, type, step_id, attempt, actor, data, prev_hash, hash)
    select u.tenant_id, u.run_id, u.seq, u.created_at, u.type, u.step_id, u.attempt, u.actor, u.data::jsonb, u.prev_hash, u.hash
    from unnest(${events.map((e) => e.tenantId)}::text[], ${events.map((e) => e.runId)}::uuid[], ${events.map((e) => e.seq)}::int[],
      ${events.map((e) => e.createdAt)}::timestamptz[], ${events.map((e) => e.type)}::text[], ${events.map((e) => e.stepId)}::text[],
      ${events.map((e) => e.attempt)}::int[], ${events.map((e) => e.actor)}::text[], ${events.map((e) => JSON.stringify(e.data))}::text[],
      ${events.map((e) => e.prevHash)}::text[], ${events.map((e) => e.hash)}::text[])
      as u(tenant_id, run_id, seq, created_at, type, step_id, attempt, actor, data, prev_hash, hash)`;
}

function runBooksUpdate(books: RunBookUpdate[]) {
  return sql`
    update run r set status = u.status, event_seq = u.event_seq, event_hash = u.event_hash, dispatch_count = u.dispatch_count,
      steps_remaining = u.steps_remaining, steps_failed = u.steps_failed,
      started_at = case when u.started then coalesce(r.started_at, now()) else r.started_at end,
      finished_at = case when u.finished then coalesce(r.finished_at, now()) else r.finished_at end,
      reason = coalesce(u.reason, r.reason), outputs_hash = coalesce(u.outputs_hash, r.outputs_hash)
    from unnest(${books.map((b) => b.tenantId)}::text[], ${books.map((b) => b.runId)}::uuid[], ${books.map((b) => b.status)}::text[],
      ${books.map((b) => b.eventSeq)}::int[], ${books.map((b) => b.eventHash)}::text[], ${books.map((b) => b.dispatchCount)}::int[],
      ${books.map((b) => b.stepsRemaining)}::int[], ${books.map((b) => b.stepsFailed)}::int[], ${books.map((b) => b.started)}::bool[],
      ${books.map((b) => b.finished)}::bool[], ${books.map((b) => b.reason)}::text[], ${books.map((b) => b.outputsHash)}::text[])
      as u(tenant_id, run_id, status, event_seq, event_hash, dispatch_count, steps_remaining, steps_failed, started, finished,
        reason, outputs_hash)
    where r.tenant_id = u.tenant_id and r.run_id = u.run_id`;
}
