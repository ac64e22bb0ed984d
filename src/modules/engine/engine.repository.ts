import { Injectable } from '@nestjs/common';
import { sql } from 'kysely';
import type { SystemDb, SystemTx } from '../../core/database/handles';
import type { NewArtifact } from '../artifacts/artifacts.repository';
import type { RunBookRow } from '../runs/runs.repository';
import type { JobName } from './jobs';

export interface FinishAttempt extends StepKey {
  attempt: number;
  epoch: number;
  status: string;
  error: unknown;
  outputsHash: string | null;
  logsHash: string | null;
  startedAt: Date | null;
  finishedAt: Date | null;
}

export interface SetStep extends StepKey {
  from: string[];
  to: string;
  reason?: string | null;
  outputs?: unknown;
  outputsHash?: string | null;
  logsHash?: string | null;
  error?: unknown;
  terminal: boolean;
  queued?: boolean;
}

export interface StepKey {
  tenantId: string;
  runId: string;
  stepId: string;
}

export interface StepState {
  tenant_id: string;
  run_id: string;
  step_id: string;
  status: string;
  epoch: number;
  attempts: number;
  spec: unknown;
  queued_at: Date | null;
}

export interface ClaimedItem {
  tenant_id: string;
  id: number;
  run_id: string;
  step_id: string;
  enqueued_at: Date;
}

export interface DispatchedStep {
  tenant_id: string;
  run_id: string;
  step_id: string;
  epoch: number;
  attempts: number;
  plugin: string;
  config: unknown;
  spec: unknown;
  depends_on: string[];
  queued_at: Date | null;
}

/** A step left with no pending dependency by a release, and whether it was queued. */
export interface ReadyStep {
  tenant_id: string;
  run_id: string;
  step_id: string;
  topo_index: number;
  disabled: boolean;
  queued: boolean;
}

export interface ExpiredLease {
  tenant_id: string;
  id: number;
  run_id: string;
  step_id: string;
  epoch: number;
  worker_id: string;
}

/** Input of ordo_engine_advance: the worker's successful results and its room for successors. */
export interface AdvanceInput {
  worker: string;
  leaseMs: number;
  capacity: number;
  cap: number;
  completions: {
    t: string;
    r: string;
    s: string;
    a: number;
    e: number;
    /** Outputs kept inline on the step (null when only the artifact holds them). */
    o: unknown;
    oh: string;
    lh: string | null;
    sa: Date | null;
    fa: Date | null;
    ord: number;
  }[];
  artifacts: { t: string; h: string; m: string; b: string }[];
}

/** A row of ordo_engine_advance: a dispatched step ('d') or a committed event ('e'). */
export type AdvanceRow =
  | {
      kind: 'd';
      item: DispatchedStep & {
        dispatch_seq: number;
        traceparent: string;
        dag_id: string;
        dag_version: number;
        trace_id: string;
      };
    }
  | {
      kind: 'e';
      item: {
        tenantId: string;
        runId: string;
        seq: number;
        createdAt: string;
        type: string;
        stepId: string | null;
        attempt: number | null;
        actor: string;
        data: Record<string, unknown>;
        prevHash: string;
        hash: string;
        dagId: string;
        traceId: string;
        startedAt: string | null;
      };
    };

const keysSql = (keys: StepKey[]) =>
  sql`unnest(${keys.map((k) => k.tenantId)}::text[], ${keys.map((k) => k.runId)}::uuid[], ${keys.map((k) => k.stepId)}::text[])`;

/**
 * System-side SQL of the execution engine: fair claims from the per-tenant queues, leases and
 * heartbeats, step and attempt state writes in bulk, job enqueueing. Callers hold the runs' row
 * locks (RunsRepository.lockRuns) before they change a run's steps.
 */
@Injectable()
export class EngineRepository {
  /**
   * One statement: the tenants with ready work and room under the in-flight cap (least recently
   * served first, at most `capacity` of them), each with its weighted share of `capacity`, and up to
   * that share of its oldest ready items, skipping items another claimer holds.
   */
  async claimReady(
    tx: SystemTx,
    capacity: number,
    cap: number,
  ): Promise<(ClaimedItem & { share: number; weight: number; in_flight: number })[]> {
    const r = await sql<ClaimedItem & { share: number; weight: number; in_flight: number }>`
      with t as (
        select tq.tenant_id, tq.weight, tq.in_flight, tq.served_at from tenant_queue tq
        where tq.in_flight < ${cap}
          and exists (select 1 from queue_item q where q.tenant_id = tq.tenant_id and q.state = 'ready')
        order by tq.served_at, tq.tenant_id
        limit ${Math.min(256, capacity)}
      ),
      s as (
        select t.tenant_id, t.weight, t.in_flight, t.served_at,
          least(${cap} - t.in_flight, ${capacity}, greatest(1, floor(${capacity}::numeric * t.weight / sum(t.weight) over ())))::int as share
        from t
      )
      select q.tenant_id, q.id, q.run_id, q.step_id, q.enqueued_at, s.share, s.weight, s.in_flight
      from s cross join lateral (
        select i.tenant_id, i.id, i.run_id, i.step_id, i.enqueued_at from queue_item i
        where i.tenant_id = s.tenant_id and i.state = 'ready'
        order by i.id limit s.share
        for update skip locked
      ) q
      order by s.served_at, s.tenant_id, q.id`.execute(tx);
    return r.rows;
  }

  /**
   * One statement for the first claim round and its dispatch: takes each served tenant's share of
   * ready items (as claimReady), locks their runs (key order), and for items of active runs whose
   * step is still queued moves the step to running (new epoch, attempt, dispatch number after the
   * run's last one, in queue order), leases the item to the worker and opens the attempt row
   * (traceparent from the run's trace id and one of `spanIds`). Items of ended runs or of steps no
   * longer queued leave the queue. Returns the claimed items (with the tenants' shares, for further
   * rounds), the locked runs' bookkeeping and the dispatched steps. With `skipLocked` it never
   * waits: tenants and runs locked by another transaction are left for later.
   */
  async claimAndDispatch(
    tx: SystemTx,
    o: {
      capacity: number;
      cap: number;
      workerId: string;
      leaseMs: number;
      spanIds: string[];
      /** Leave out tenants and runs another transaction holds (a claim that must not wait). */
      skipLocked?: boolean;
      /** Tenants not to claim for. */
      excludeTenants?: string[];
    },
  ): Promise<{
    claimed: (ClaimedItem & { share: number; weight: number; in_flight: number })[];
    runs: RunBookRow[];
    dispatched: (DispatchedStep & { item_id: number; dispatch_seq: number; traceparent: string })[];
  }> {
    const r = await sql<{ kind: 'c' | 'r' | 'd'; row: Record<string, unknown> }>`
      with t as (
        select tq.tenant_id, tq.weight, tq.in_flight, tq.served_at from tenant_queue tq
        where tq.in_flight < ${o.cap} and tq.tenant_id <> all(${o.excludeTenants ?? []}::text[])
          and exists (select 1 from queue_item q where q.tenant_id = tq.tenant_id and q.state = 'ready')
        order by tq.served_at, tq.tenant_id
        limit ${Math.min(256, o.capacity)}
        ${o.skipLocked ? sql`for update of tq skip locked` : sql``}
      ),
      s as (
        select t.tenant_id, t.weight, t.in_flight, t.served_at,
          least(${o.cap} - t.in_flight, ${o.capacity}, greatest(1, floor(${o.capacity}::numeric * t.weight / sum(t.weight) over ())))::int as share
        from t
      ),
      ca as (
        select q.tenant_id, q.id, q.run_id, q.step_id, q.enqueued_at, s.share, s.weight, s.in_flight, s.served_at,
          row_number() over (order by s.served_at, s.tenant_id, q.id) as rk
        from s cross join lateral (
          select i.tenant_id, i.id, i.run_id, i.step_id, i.enqueued_at from queue_item i
          where i.tenant_id = s.tenant_id and i.state = 'ready'
          order by i.id limit s.share
          for update skip locked
        ) q
      ),
      c as materialized (select * from ca where rk <= ${o.capacity}),
      rc as materialized (
        select r.tenant_id, r.run_id, r.dag_id, r.dag_version, r.status, r.trace_id, r.event_seq, r.event_hash, r.dispatch_count,
          r.steps_remaining, r.steps_failed, r.started_at, c.id, c.step_id, c.enqueued_at, c.rk
        from c join run r on r.tenant_id = c.tenant_id and r.run_id = c.run_id
        order by r.tenant_id, r.run_id
        for update of r ${o.skipLocked ? sql`skip locked` : sql``}
      ),
      rl as (
        select distinct on (tenant_id, run_id) tenant_id, run_id, dag_id, dag_version, status, trace_id, event_seq, event_hash,
          dispatch_count, steps_remaining, steps_failed, started_at
        from rc order by tenant_id, run_id
      ),
      o as (
        select rc.tenant_id, rc.id, rc.run_id, rc.step_id, rc.enqueued_at,
          rc.dispatch_count + row_number() over (partition by rc.tenant_id, rc.run_id order by rc.id) as seq,
          '00-' || rc.trace_id || '-' || (${o.spanIds}::text[])[rc.rk::int] || '-01' as traceparent
        from rc
        join step st on st.tenant_id = rc.tenant_id and st.run_id = rc.run_id and st.step_id = rc.step_id
        where rc.status in ('queued', 'running') and st.status = 'queued'
      ),
      d as (
        update step s set status = 'running', epoch = s.epoch + 1, attempts = s.attempts + 1,
          dispatch_seq = coalesce(s.dispatch_seq, o.seq::int), started_at = coalesce(s.started_at, now())
        from o
        where s.tenant_id = o.tenant_id and s.run_id = o.run_id and s.step_id = o.step_id and s.status = 'queued'
        returning s.tenant_id, s.run_id, s.step_id, s.epoch, s.attempts, s.plugin, s.config, s.spec, s.depends_on, s.queued_at,
          o.id as item_id, o.enqueued_at, o.traceparent, o.seq::int as dispatch_seq
      ),
      l as (
        update queue_item q set state = 'leased', worker_id = ${o.workerId}, epoch = d.epoch,
          lease_expires_at = now() + make_interval(secs => ${o.leaseMs / 1000})
        from d where q.tenant_id = d.tenant_id and q.id = d.item_id
        returning 1
      ),
      a as (
        insert into attempt (tenant_id, run_id, step_id, attempt, epoch, worker_id, lease_expires_at, traceparent, queued_at,
          claimed_at, constraint_checked_at)
        select d.tenant_id, d.run_id, d.step_id, d.attempts, d.epoch, ${o.workerId}, now() + make_interval(secs => ${o.leaseMs / 1000}),
          d.traceparent, coalesce(d.queued_at, d.enqueued_at), now(), now()
        from d
        returning 1
      ),
      x as (
        delete from queue_item q using rc
        where q.tenant_id = rc.tenant_id and q.id = rc.id and q.id not in (select d.item_id from d)
        returning 1
      )
      select 'c' as kind, to_jsonb(c) as row from c
      union all
      select 'r', to_jsonb(rl) from rl
      union all
      select 'd', to_jsonb(d) from d`.execute(tx);
    const claimed: (ClaimedItem & { share: number; weight: number; in_flight: number; served_at?: string })[] = [];
    const runs: RunBookRow[] = [];
    const dispatched: (DispatchedStep & { item_id: number; dispatch_seq: number; traceparent: string })[] = [];
    const date = (v: unknown) => (v === null || v === undefined ? null : new Date(v as string));
    for (const x of r.rows) {
      if (x.kind === 'c') {
        const row = x.row as unknown as ClaimedItem & { share: number; weight: number; in_flight: number };
        claimed.push({ ...row, enqueued_at: date(row.enqueued_at)! });
      } else if (x.kind === 'r') {
        const row = x.row as unknown as RunBookRow;
        runs.push({ ...row, started_at: date(row.started_at) });
      } else {
        const row = x.row as unknown as DispatchedStep & { item_id: number; dispatch_seq: number; traceparent: string };
        dispatched.push({ ...row, queued_at: date(row.queued_at) });
      }
    }
    // Queue order: least recently served tenant first, then item id (as claimReady).
    const served = new Map(claimed.map((c) => [c.tenant_id, (c as { served_at?: string }).served_at ?? '']));
    claimed.sort((a, b) => {
      const sa = served.get(a.tenant_id)!;
      const sb = served.get(b.tenant_id)!;
      return sa !== sb
        ? sa < sb
          ? -1
          : 1
        : a.tenant_id !== b.tenant_id
          ? a.tenant_id < b.tenant_id
            ? -1
            : 1
          : a.id - b.id;
    });
    return { claimed, runs, dispatched };
  }

  /**
   * One statement: moves queued steps to running (new fencing epoch, attempt number, dispatch
   * number), leases their queue items to the worker and opens their attempt rows. Returns the
   * steps dispatched (a step no longer queued is left out).
   */
  async dispatchAndLease(
    tx: SystemTx,
    steps: (StepKey & { dispatchSeq: number; itemId: number; enqueuedAt: Date; traceparent: string })[],
    workerId: string,
    leaseMs: number,
  ): Promise<(DispatchedStep & { item_id: number })[]> {
    if (steps.length === 0) return [];
    const r = await sql<DispatchedStep & { item_id: number }>`
      with d as (
        update step s set status = 'running', epoch = s.epoch + 1, attempts = s.attempts + 1,
          dispatch_seq = coalesce(s.dispatch_seq, u.seq), started_at = coalesce(s.started_at, now())
        from unnest(${steps.map((k) => k.tenantId)}::text[], ${steps.map((k) => k.runId)}::uuid[], ${steps.map((k) => k.stepId)}::text[],
          ${steps.map((k) => k.dispatchSeq)}::int[], ${steps.map((k) => k.itemId)}::bigint[], ${steps.map((k) => k.enqueuedAt)}::timestamptz[],
          ${steps.map((k) => k.traceparent)}::text[]) as u(tenant_id, run_id, step_id, seq, item_id, enqueued_at, traceparent)
        where s.tenant_id = u.tenant_id and s.run_id = u.run_id and s.step_id = u.step_id and s.status = 'queued'
        returning s.tenant_id, s.run_id, s.step_id, s.epoch, s.attempts, s.plugin, s.config, s.spec, s.depends_on, s.queued_at,
          u.item_id, u.enqueued_at, u.traceparent
      ),
      l as (
        update queue_item q set state = 'leased', worker_id = ${workerId}, epoch = d.epoch,
          lease_expires_at = now() + make_interval(secs => ${leaseMs / 1000})
        from d where q.tenant_id = d.tenant_id and q.id = d.item_id
        returning 1
      ),
      a as (
        insert into attempt (tenant_id, run_id, step_id, attempt, epoch, worker_id, lease_expires_at, traceparent, queued_at,
          claimed_at, constraint_checked_at)
        select d.tenant_id, d.run_id, d.step_id, d.attempts, d.epoch, ${workerId}, now() + make_interval(secs => ${leaseMs / 1000}),
          d.traceparent, coalesce(d.queued_at, d.enqueued_at), now(), now()
        from d
        returning 1
      )
      select tenant_id, run_id, step_id, epoch, attempts, plugin, config, spec, depends_on, queued_at, item_id from d`.execute(
      tx,
    );
    return r.rows;
  }

  /** Takes up to `n` ready items per tenant, oldest first, skipping items another claimer holds. */
  async pickReady(
    tx: SystemTx,
    shares: { tenantId: string; n: number }[],
    exclude: number[] = [],
  ): Promise<ClaimedItem[]> {
    if (shares.length === 0) return [];
    const r = await sql<ClaimedItem>`
      select q.tenant_id, q.id, q.run_id, q.step_id, q.enqueued_at
      from unnest(${shares.map((s) => s.tenantId)}::text[], ${shares.map((s) => s.n)}::int[]) as t(tenant_id, n)
      cross join lateral (
        select i.tenant_id, i.id, i.run_id, i.step_id, i.enqueued_at from queue_item i
        where i.tenant_id = t.tenant_id and i.state = 'ready' and i.id <> all(${exclude}::bigint[])
        order by i.id limit t.n
        for update skip locked
      ) q
      order by q.tenant_id, q.id`.execute(tx);
    return r.rows;
  }

  /**
   * One statement: locks the runs (in key order, like RunsRepository.lockRuns) and then the given
   * steps, returning the runs' bookkeeping and the steps' current states (the latest committed
   * versions: locked rows are re-read after any wait).
   */
  async lockRunsAndSteps(tx: SystemTx, keys: StepKey[]): Promise<{ runs: RunBookRow[]; states: StepState[] }> {
    if (keys.length === 0) return { runs: [], states: [] };
    const r = await sql<{ kind: 'r' | 's'; row: Record<string, unknown> }>`
      with rl as (
        select r.tenant_id, r.run_id, r.dag_id, r.dag_version, r.status, r.trace_id, r.event_seq, r.event_hash, r.dispatch_count,
          r.steps_remaining, r.steps_failed, r.started_at
        from run r
        join (select distinct k.tenant_id, k.run_id from ${keysSql(keys)} as k(tenant_id, run_id, step_id)) k
          on r.tenant_id = k.tenant_id and r.run_id = k.run_id
        order by r.tenant_id, r.run_id
        for update of r
      ),
      sl as (
        select s.tenant_id, s.run_id, s.step_id, s.status, s.epoch, s.attempts, s.spec, s.queued_at
        from step s join ${keysSql(keys)} as k(tenant_id, run_id, step_id)
          on s.tenant_id = k.tenant_id and s.run_id = k.run_id and s.step_id = k.step_id
        order by s.tenant_id, s.run_id, s.step_id
        for update of s
      )
      select 'r' as kind, to_jsonb(rl) as row from rl
      union all
      select 's', to_jsonb(sl) from sl`.execute(tx);
    const runs: RunBookRow[] = [];
    const states: StepState[] = [];
    for (const x of r.rows) {
      if (x.kind === 'r') {
        const row = x.row as unknown as RunBookRow & { started_at: string | null };
        runs.push({ ...row, started_at: row.started_at === null ? null : new Date(row.started_at) });
      } else {
        const row = x.row as unknown as StepState & { queued_at: string | null };
        states.push({ ...row, queued_at: row.queued_at === null ? null : new Date(row.queued_at) });
      }
    }
    return { runs, states };
  }

  async stepStates(tx: SystemTx, keys: StepKey[]): Promise<StepState[]> {
    if (keys.length === 0) return [];
    const r = await sql<StepState>`
      select s.tenant_id, s.run_id, s.step_id, s.status, s.epoch, s.attempts, s.spec, s.queued_at
      from step s join ${keysSql(keys)} as k(tenant_id, run_id, step_id)
        on s.tenant_id = k.tenant_id and s.run_id = k.run_id and s.step_id = k.step_id`.execute(tx);
    return r.rows;
  }

  async deleteItems(tx: SystemTx, items: { tenantId: string; id: number }[]): Promise<void> {
    if (items.length === 0) return;
    await sql`
      delete from queue_item q using unnest(${items.map((i) => i.tenantId)}::text[], ${items.map((i) => i.id)}::bigint[]) as u(tenant_id, id)
      where q.tenant_id = u.tenant_id and q.id = u.id`.execute(tx);
  }

  /** Ends running attempts (only those still running at that epoch). */
  async finishAttempts(tx: SystemTx, rows: FinishAttempt[]): Promise<void> {
    if (rows.length === 0) return;
    await sql`${finishAttemptsSql(rows)}`.execute(tx);
  }

  /** Sets step states (each write names the states it may come from: the transition table). */
  async setSteps(tx: SystemTx, rows: SetStep[]): Promise<StepKey[]> {
    if (rows.length === 0) return [];
    const r = await sql<{ tenant_id: string; run_id: string; step_id: string }>`${setStepsSql(rows)}`.execute(tx);
    return r.rows.map((x) => ({ tenantId: x.tenant_id, runId: x.run_id, stepId: x.step_id }));
  }

  /**
   * The write half of applying a batch of results, as one statement: attempts end, steps move on
   * (returned, to check every transition was allowed), the workers' leases are released (and their
   * tenants' in-flight counters lowered) and artifacts are stored.
   */
  async completeBatch(
    tx: SystemTx,
    b: {
      attempts: FinishAttempt[];
      steps: SetStep[];
      released: (StepKey & { epoch: number })[];
      artifacts: NewArtifact[];
      /** Steps that succeeded in this batch: their dependents are counted down and queued (see releaseAndQueue). */
      done?: StepKey[];
    },
  ): Promise<{ written: StepKey[]; ready: ReadyStep[] }> {
    const rel = b.released;
    const done = b.done ?? [];
    const arts = [...new Map(b.artifacts.map((a) => [`${a.tenantId}/${a.sha256}`, a])).values()];
    const r = await sql<{
      kind: 'w' | 'r';
      tenant_id: string;
      run_id: string;
      step_id: string;
      topo_index: number | null;
      disabled: boolean | null;
      queued: boolean | null;
    }>`
      with fa as (${b.attempts.length > 0 ? sql`${finishAttemptsSql(b.attempts)} returning 1` : sql`select 1`}),
      st as (${b.steps.length > 0 ? setStepsSql(b.steps) : sql`select null::text as tenant_id, null::uuid as run_id, null::text as step_id where false`}),
      rl as (
        delete from queue_item q
        using unnest(${rel.map((k) => k.tenantId)}::text[], ${rel.map((k) => k.runId)}::uuid[], ${rel.map((k) => k.stepId)}::text[],
          ${rel.map((k) => k.epoch)}::int[]) as u(tenant_id, run_id, step_id, epoch)
        where q.tenant_id = u.tenant_id and q.run_id = u.run_id and q.step_id = u.step_id and q.state = 'leased' and q.epoch = u.epoch
        returning q.tenant_id
      ),
      rc as (select tenant_id, count(*)::int as n from rl group by tenant_id),
      tq as (
        update tenant_queue t set in_flight = greatest(0, t.in_flight - rc.n) from rc where t.tenant_id = rc.tenant_id returning 1
      ),
      ar as (
        insert into artifact (tenant_id, sha256, media_type, size, body_json)
        select u.tenant_id, u.sha256, u.media_type, octet_length(u.body), u.body::jsonb
        from unnest(${arts.map((a) => a.tenantId)}::text[], ${arts.map((a) => a.sha256)}::text[],
          ${arts.map((a) => a.mediaType)}::text[], ${arts.map((a) => a.json)}::text[]) as u(tenant_id, sha256, media_type, body)
        on conflict do nothing
        returning 1
      )${done.length > 0 ? sql`, ${releaseCtes(done)}` : sql``}
      select 'w' as kind, tenant_id, run_id, step_id, null::int as topo_index, null::bool as disabled, null::bool as queued,
        null::bigint as notified from st
      ${
        done.length > 0
          ? sql`union all
      select 'r', u.tenant_id, u.run_id, u.step_id, u.topo_index, u.disabled, u.ready,
        case when u.ready then (select count(*) from w) end as notified
      from u where u.pending_deps = 0`
          : sql``
      }`.execute(tx);
    const written: StepKey[] = [];
    const ready: ReadyStep[] = [];
    for (const x of r.rows) {
      if (x.kind === 'w') written.push({ tenantId: x.tenant_id, runId: x.run_id, stepId: x.step_id });
      else
        ready.push({
          tenant_id: x.tenant_id,
          run_id: x.run_id,
          step_id: x.step_id,
          topo_index: x.topo_index!,
          disabled: x.disabled!,
          queued: x.queued!,
        });
    }
    return { written, ready };
  }

  /**
   * One statement: counts finished dependencies down (each pending step that depends on a step in
   * `done` loses one pending dependency per such step) and moves the steps
   * left with none — unless disabled or their run has ended — to queued, putting them into the
   * ready queue in topological order and waking workers. Returns every step left with no pending
   * dependency, with whether it was queued.
   */
  async releaseAndQueue(tx: SystemTx, done: StepKey[]): Promise<ReadyStep[]> {
    if (done.length === 0) return [];
    const r = await sql<ReadyStep>`
      with ${releaseCtes(done)}
      select u.tenant_id, u.run_id, u.step_id, u.topo_index, u.disabled, u.ready as queued,
        case when u.ready then (select count(*) from w) end as notified
      from u where u.pending_deps = 0`.execute(tx);
    return r.rows;
  }

  /** Every pending step downstream of the given failed steps (within their runs). */
  async pendingDescendants(tx: SystemTx, failed: StepKey[]): Promise<StepKey[]> {
    if (failed.length === 0) return [];
    const r = await sql<{ tenant_id: string; run_id: string; step_id: string }>`
      with recursive down(tenant_id, run_id, step_id) as (
        select k.tenant_id, k.run_id, k.step_id from ${keysSql(failed)} as k(tenant_id, run_id, step_id)
        union
        select s.tenant_id, s.run_id, s.step_id from down
        join step s on s.tenant_id = down.tenant_id and s.run_id = down.run_id and down.step_id = any(s.depends_on)
      )
      select d.tenant_id, d.run_id, d.step_id from down d
      join step s on s.tenant_id = d.tenant_id and s.run_id = d.run_id and s.step_id = d.step_id
      where s.status = 'pending'
      order by d.tenant_id, d.run_id, s.topo_index`.execute(tx);
    return r.rows.map((x) => ({ tenantId: x.tenant_id, runId: x.run_id, stepId: x.step_id }));
  }

  /** Outputs of finished steps (for templating their dependents' `with`). */
  async outputsOf(
    tx: SystemTx,
    keys: StepKey[],
  ): Promise<{ tenant_id: string; run_id: string; step_id: string; outputs: unknown; outputs_hash: string | null }[]> {
    if (keys.length === 0) return [];
    const r = await sql<{
      tenant_id: string;
      run_id: string;
      step_id: string;
      outputs: unknown;
      outputs_hash: string | null;
    }>`
      select s.tenant_id, s.run_id, s.step_id, s.outputs, s.outputs_hash from step s
      join ${keysSql(keys)} as k(tenant_id, run_id, step_id)
        on s.tenant_id = k.tenant_id and s.run_id = k.run_id and s.step_id = k.step_id
      where s.status = 'succeeded'`.execute(tx);
    return r.rows;
  }

  async runInputs(
    tx: SystemTx,
    keys: { tenantId: string; runId: string }[],
  ): Promise<{ tenant_id: string; run_id: string; inputs: unknown }[]> {
    if (keys.length === 0) return [];
    const r = await sql<{ tenant_id: string; run_id: string; inputs: unknown }>`
      select r.tenant_id, r.run_id, r.inputs from run r
      join unnest(${keys.map((k) => k.tenantId)}::text[], ${keys.map((k) => k.runId)}::uuid[]) as k(tenant_id, run_id)
        on r.tenant_id = k.tenant_id and r.run_id = k.run_id`.execute(tx);
    return r.rows;
  }

  /** Adds in-flight deltas per tenant; tenants that were served get served_at = now(). */
  async adjustInFlight(tx: SystemTx, deltas: Map<string, { delta: number; served: boolean }>): Promise<void> {
    if (deltas.size === 0) return;
    const list = [...deltas.entries()].sort(([a], [b]) => (a < b ? -1 : 1));
    await sql`
      update tenant_queue tq set in_flight = greatest(0, tq.in_flight + u.delta),
        served_at = case when u.served then clock_timestamp() else tq.served_at end
      from unnest(${list.map(([t]) => t)}::text[], ${list.map(([, d]) => d.delta)}::int[], ${list.map(([, d]) => d.served)}::bool[])
        as u(tenant_id, delta, served)
      where tq.tenant_id = u.tenant_id`.execute(tx);
  }

  /** Extends the leases this worker still holds; returns the ones it holds. */
  async heartbeat(
    tx: SystemTx,
    workerId: string,
    items: (StepKey & { epoch: number })[],
    leaseMs: number,
  ): Promise<StepKey[]> {
    if (items.length === 0) return [];
    const r = await sql<{ tenant_id: string; run_id: string; step_id: string }>`
      update queue_item q set lease_expires_at = now() + make_interval(secs => ${leaseMs / 1000})
      from unnest(${items.map((k) => k.tenantId)}::text[], ${items.map((k) => k.runId)}::uuid[], ${items.map((k) => k.stepId)}::text[],
        ${items.map((k) => k.epoch)}::int[]) as u(tenant_id, run_id, step_id, epoch)
      where q.tenant_id = u.tenant_id and q.run_id = u.run_id and q.step_id = u.step_id
        and q.state = 'leased' and q.worker_id = ${workerId} and q.epoch = u.epoch
      returning q.tenant_id, q.run_id, q.step_id`.execute(tx);
    return r.rows.map((x) => ({ tenantId: x.tenant_id, runId: x.run_id, stepId: x.step_id }));
  }

  /** Expired leases, oldest first, locked (skipping ones another reaper holds). */
  async expiredLeases(tx: SystemTx, limit: number): Promise<ExpiredLease[]> {
    const r = await sql<ExpiredLease>`
      select tenant_id, id, run_id, step_id, epoch, worker_id from queue_item
      where state = 'leased' and lease_expires_at < now()
      order by lease_expires_at limit ${limit}
      for update skip locked`.execute(tx);
    return r.rows;
  }

  /**
   * The one-statement hop (migrations/011_engine_advance.sql), committed on its own: applies
   * successful results, makes their successors ready and dispatches up to `capacity` of them to
   * `worker`, appending the chained events. Raises SQLSTATE OR001 (nothing written) when the
   * batch needs the general engine transaction.
   */
  async advance(db: SystemDb, p: AdvanceInput): Promise<AdvanceRow[]> {
    const r = await sql<AdvanceRow>`select kind, item from ordo_engine_advance(${JSON.stringify(p)}::jsonb)`.execute(
      db,
    );
    return r.rows;
  }

  /** Adds a graphile-worker job in the caller's transaction (deterministic job_key: at most one pending per key). */
  async addJob(
    tx: SystemTx,
    name: JobName,
    payload: unknown,
    opts: { runAt?: Date; jobKey: string; maxAttempts: number },
  ): Promise<void> {
    await sql`select graphile_worker.add_job(${name}, ${JSON.stringify(payload)}::json, run_at => ${opts.runAt ?? null}::timestamptz,
      job_key => ${opts.jobKey}, max_attempts => ${opts.maxAttempts})`.execute(tx);
  }

  async webhookSecret(tx: SystemTx, tenantId: string, fresh: string): Promise<string> {
    await sql`insert into tenant_webhook_secret (tenant_id, secret) values (${tenantId}, ${fresh}) on conflict do nothing`.execute(
      tx,
    );
    const r = await sql<{
      secret: string;
    }>`select secret from tenant_webhook_secret where tenant_id = ${tenantId}`.execute(tx);
    return r.rows[0].secret;
  }

  async event(tx: SystemTx, tenantId: string, runId: string, seq: number) {
    const r = await sql<{
      type: string;
      step_id: string | null;
      data: unknown;
      created_at: Date;
      hash: string;
      actor: string;
    }>`
      select type, step_id, data, created_at, hash, actor from run_event where tenant_id = ${tenantId} and run_id = ${runId} and seq = ${seq}`.execute(
      tx,
    );
    return r.rows[0];
  }
}

/**
 * CTEs d, u, i, w: counts finished dependencies down (each pending step that depends on a step in
 * `done` loses one pending dependency per such step) and moves the steps left with none — unless
 * disabled or their run has ended — to queued, putting them into the ready queue in topological
 * order and waking workers (one notification per tenant, the tenant id as payload).
 */
function releaseCtes(done: StepKey[]) {
  return sql`
      d as (
        select s.tenant_id, s.run_id, s.step_id, count(*)::int as n,
          s.pending_deps - count(*)::int = 0 and not coalesce((s.spec->>'disabled')::boolean, false)
            and r.status in ('queued', 'running') as ready
        from ${keysSql(done)} as k(tenant_id, run_id, step_id)
        join step s on s.tenant_id = k.tenant_id and s.run_id = k.run_id and k.step_id = any(s.depends_on)
        join run r on r.tenant_id = s.tenant_id and r.run_id = s.run_id
        where s.status = 'pending'
        group by s.tenant_id, s.run_id, s.step_id, s.pending_deps, s.spec, r.status
      ),
      u as (
        update step s set pending_deps = s.pending_deps - d.n,
          status = case when d.ready then 'queued' else s.status end,
          queued_at = case when d.ready then now() else s.queued_at end
        from d where s.tenant_id = d.tenant_id and s.run_id = d.run_id and s.step_id = d.step_id
        returning s.tenant_id, s.run_id, s.step_id, s.topo_index, s.pending_deps, d.ready,
          coalesce((s.spec->>'disabled')::boolean, false) as disabled
      ),
      i as (
        insert into queue_item (tenant_id, run_id, step_id)
        select tenant_id, run_id, step_id from u where ready order by tenant_id, run_id, topo_index, step_id
        returning 1
      ),
      w as (select pg_notify('ordo_ready', x.tenant_id) as x from (select distinct tenant_id from u where ready) x)`;
}

const json = (v: unknown) => (v === undefined || v === null ? null : JSON.stringify(v));

function finishAttemptsSql(rows: FinishAttempt[]) {
  return sql`
    update attempt a set status = u.status, error = u.error::jsonb, outputs_hash = u.outputs_hash, logs_hash = u.logs_hash,
      started_at = coalesce(u.started_at, a.started_at), finished_at = coalesce(u.finished_at, a.finished_at), terminated_at = now()
    from unnest(${rows.map((r) => r.tenantId)}::text[], ${rows.map((r) => r.runId)}::uuid[], ${rows.map((r) => r.stepId)}::text[],
      ${rows.map((r) => r.attempt)}::int[], ${rows.map((r) => r.epoch)}::int[], ${rows.map((r) => r.status)}::text[],
      ${rows.map((r) => json(r.error))}::text[], ${rows.map((r) => r.outputsHash)}::text[], ${rows.map((r) => r.logsHash)}::text[],
      ${rows.map((r) => r.startedAt)}::timestamptz[], ${rows.map((r) => r.finishedAt)}::timestamptz[])
      as u(tenant_id, run_id, step_id, attempt, epoch, status, error, outputs_hash, logs_hash, started_at, finished_at)
    where a.tenant_id = u.tenant_id and a.run_id = u.run_id and a.step_id = u.step_id and a.attempt = u.attempt
      and a.epoch = u.epoch and a.status = 'running'`;
}

function setStepsSql(rows: SetStep[]) {
  return sql`
    update step s set status = u.status, reason = coalesce(u.reason, s.reason),
      outputs = coalesce(u.outputs::jsonb, s.outputs), outputs_hash = coalesce(u.outputs_hash, s.outputs_hash),
      logs_hash = coalesce(u.logs_hash, s.logs_hash), error = coalesce(u.error::jsonb, s.error),
      finished_at = case when u.terminal then now() else s.finished_at end,
      queued_at = case when u.queued then now() else s.queued_at end
    from unnest(${rows.map((r) => r.tenantId)}::text[], ${rows.map((r) => r.runId)}::uuid[], ${rows.map((r) => r.stepId)}::text[],
      ${rows.map((r) => JSON.stringify(r.from))}::text[], ${rows.map((r) => r.to)}::text[], ${rows.map((r) => r.reason ?? null)}::text[],
      ${rows.map((r) => json(r.outputs))}::text[], ${rows.map((r) => r.outputsHash ?? null)}::text[], ${rows.map((r) => r.logsHash ?? null)}::text[],
      ${rows.map((r) => json(r.error))}::text[], ${rows.map((r) => r.terminal)}::bool[], ${rows.map((r) => r.queued ?? false)}::bool[])
      as u(tenant_id, run_id, step_id, from_states, status, reason, outputs, outputs_hash, logs_hash, error, terminal, queued)
    where s.tenant_id = u.tenant_id and s.run_id = u.run_id and s.step_id = u.step_id
      and s.status in (select jsonb_array_elements_text(u.from_states::jsonb))
    returning s.tenant_id, s.run_id, s.step_id`;
}
