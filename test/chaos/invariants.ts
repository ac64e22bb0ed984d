import type pg from 'pg';
import { verifyChain } from '../../src/modules/runs/run-events';
import { chainedEvent, RUN_EVENT_COLUMNS, type RunEventRow } from '../support/run-event-rows';
import { sleep } from './cluster';
import type { WorkerLine } from './fleet';
import { expectedOutputs, expectedStatus, type Submitted } from './workload';

/**
 * The pass criteria, read straight from the database as its owner (no RLS, no Ordo code in the
 * way). Each check returns the violated invariants by name with a few examples.
 */

const TERMINAL = ['succeeded', 'failed', 'cancelled'];

export interface Counts {
  runs: number;
  lost: number;
  duplicated: number;
  staleApplied: number;
  staleRejected: number;
}

export interface CheckResult {
  violations: string[];
  counts: Counts;
}

interface RunRow {
  run_id: string;
  tenant_id: string;
  run_token: string;
  status: string;
}

/**
 * Waits (bounded) until every acknowledged run is terminal and the ready queue is empty. Gives up
 * early when the number of runs still open has not reached a new low for `stallMs`: a stuck run
 * does not get unstuck by waiting out the whole bound (runs that come and go do not count as progress).
 */
export async function drain(
  conn: () => Promise<pg.Client>,
  runs: Submitted[],
  timeoutMs: number,
  stallMs = 120_000,
): Promise<boolean> {
  const ids = runs.filter((r) => r.runId).map((r) => r.runId!);
  const deadline = Date.now() + timeoutMs;
  let low = Infinity;
  let lastMove = Date.now();
  for (;;) {
    try {
      const db = await conn();
      const open = await db.query<{ n: number }>(
        `select count(*)::int as n from run where run_id = any($1::uuid[]) and status <> all($2)`,
        [ids, TERMINAL],
      );
      const queued = await db.query<{ n: number }>(`select count(*)::int as n from queue_item`);
      const sched = await db.query<{ n: number }>(
        `select count(*)::int as n from run where run_token like 'schedule:%' and status <> all($1)`,
        [TERMINAL],
      );
      if (open.rows[0].n === 0 && queued.rows[0].n === 0 && sched.rows[0].n === 0) return true;
      const left = open.rows[0].n + sched.rows[0].n;
      if (left < low) {
        low = left;
        lastMove = Date.now();
      }
    } catch {
      // The database may be restarting; ask again.
    }
    if (Date.now() > deadline || Date.now() - lastMove > stallMs) return false;
    await sleep(250);
  }
}

type StepRow = { run_id: string; step_id: string; status: string; outputs: unknown; epoch: number };
type AttemptRow = { run_id: string; step_id: string; attempt: number; epoch: number; status: string };

/**
 * The invariants over `submitted` and the runs created since `sinceIso`. With `scheduleRuns` false,
 * the schedule's runs are not required to be terminal: a check made while the schedule still fires
 * (the storm's, before the cell pauses it) can meet its newest run before a worker claimed it.
 */
export async function checkRuns(
  db: pg.Client,
  submitted: Submitted[],
  sinceIso: string,
  { scheduleRuns = true }: { scheduleRuns?: boolean } = {},
): Promise<CheckResult> {
  const violations: string[] = [];
  const add = (name: string, examples: string[]) => {
    if (examples.length > 0) violations.push(`${name}: ${examples.length} (e.g. ${examples.slice(0, 3).join('; ')})`);
  };

  // Runs of this cell: the harness's own plus the schedules' (created since the cell began). Runs,
  // steps, attempts and events are read in one snapshot: a run still going (the storm's check meets
  // the steady load's runs) must not show a step read before its claim beside its attempt read after.
  let rows: RunRow[];
  let steps: StepRow[];
  let attempts: AttemptRow[];
  let events: RunEventRow[];
  await db.query('begin isolation level repeatable read read only');
  try {
    rows = (
      await db.query<RunRow>(
        `select run_id, tenant_id, run_token, status from run where created_at >= $1 or run_id = any($2::uuid[])`,
        [sinceIso, submitted.filter((s) => s.runId).map((s) => s.runId!)],
      )
    ).rows;
    const runIds = rows.map((r) => r.run_id);
    steps = (
      await db.query<StepRow>(
        `select run_id, step_id, status, outputs, epoch from step where run_id = any($1::uuid[])`,
        [runIds],
      )
    ).rows;
    attempts = (
      await db.query<AttemptRow>(
        `select run_id, step_id, attempt, epoch, status from attempt where run_id = any($1::uuid[])`,
        [runIds],
      )
    ).rows;
    events = (
      await db.query<RunEventRow>(
        `select ${RUN_EVENT_COLUMNS} from run_event where run_id = any($1::uuid[]) order by run_id, seq`,
        [runIds],
      )
    ).rows;
  } finally {
    await db.query('rollback');
  }
  const byToken = new Map(rows.map((r) => [`${r.tenant_id} ${r.run_token}`, r]));

  const unacked = submitted.filter((s) => !s.runId).map((s) => s.token);
  add('every submission acknowledged', unacked);

  const lost: string[] = [];
  const wrongStatus: string[] = [];
  for (const s of submitted) {
    const r = byToken.get(`${s.tenant} ${s.token}`);
    if (!r) {
      if (s.runId) lost.push(`${s.token} missing`);
      continue;
    }
    if (!TERMINAL.includes(r.status)) lost.push(`${s.token} still ${r.status}`);
    else if (!(s.kind === 'cancel' && s.cancelled === false) && r.status !== expectedStatus(s.kind))
      wrongStatus.push(`${s.token} (${s.kind}) ${r.status}`);
  }
  if (scheduleRuns)
    for (const r of rows)
      if (!TERMINAL.includes(r.status) && r.run_token.startsWith('schedule:'))
        lost.push(`${r.run_token} still ${r.status}`);
  add('zero lost runs (every run exists and is terminal)', lost);
  add('every run ends as its kind must', wrongStatus);

  // Outputs exactly as expected, step by step.
  const stepsByRun = new Map<string, Map<string, StepRow>>();
  for (const s of steps) {
    if (!stepsByRun.has(s.run_id)) stepsByRun.set(s.run_id, new Map());
    stepsByRun.get(s.run_id)!.set(s.step_id, s);
  }
  const wrongOutputs: string[] = [];
  for (const s of submitted) {
    const r = byToken.get(`${s.tenant} ${s.token}`);
    const want = expectedOutputs(s.kind, s.k);
    if (!r || !want || r.status !== 'succeeded') continue;
    const have = stepsByRun.get(r.run_id);
    for (const [stepId, out] of Object.entries(want)) {
      const st = have?.get(stepId);
      if (!st || st.status !== 'succeeded' || JSON.stringify(sortKeys(st.outputs)) !== JSON.stringify(sortKeys(out)))
        wrongOutputs.push(`${s.token}/${stepId}: ${JSON.stringify(st?.outputs)}`);
    }
  }
  add('outputs exactly as expected', wrongOutputs);

  // No step applied twice; no success applied from a superseded epoch.
  const succeeded = new Map<string, AttemptRow[]>();
  for (const a of attempts) {
    if (a.status !== 'succeeded') continue;
    const key = `${a.run_id}/${a.step_id}`;
    succeeded.set(key, [...(succeeded.get(key) ?? []), a]);
  }
  const dup: string[] = [];
  const stale: string[] = [];
  for (const [key, list] of succeeded) {
    if (list.length > 1) dup.push(`${key} ×${list.length}`);
    const [runId, stepId] = key.split('/');
    const st = stepsByRun.get(runId)?.get(stepId);
    for (const a of list)
      if (st && a.epoch !== st.epoch) stale.push(`${key} attempt ${a.attempt} epoch ${a.epoch} ≠ ${st.epoch}`);
  }
  const succEvents = new Map<string, number>();
  for (const e of events)
    if (e.type === 'step.succeeded')
      succEvents.set(`${e.run_id}/${e.step_id}`, (succEvents.get(`${e.run_id}/${e.step_id}`) ?? 0) + 1);
  for (const [key, n] of succEvents) if (n > 1) dup.push(`${key} step.succeeded ×${n}`);
  add('zero duplicated applications', dup);
  add('zero stale-epoch commits applied', stale);

  // Every run's events: seq 1..n, hash chain verifies.
  const badChains: string[] = [];
  let i = 0;
  while (i < events.length) {
    let j = i;
    while (j < events.length && events[j].run_id === events[i].run_id) j++;
    const chain = events.slice(i, j).map(chainedEvent);
    const v = verifyChain(chain);
    if (!v.ok) badChains.push(`${events[i].run_id} seq ${v.seq}: ${v.problem}`);
    i = j;
  }
  const withEvents = new Set(events.map((e) => e.run_id));
  for (const r of rows) if (!withEvents.has(r.run_id)) badChains.push(`${r.run_id}: no events`);
  add('events gap-free with a verifying hash chain', badChains);

  return {
    violations,
    counts: {
      runs: rows.length,
      lost: lost.length + unacked.length,
      duplicated: dup.length,
      staleApplied: stale.length,
      staleRejected: events.filter((e) => e.type === 'step.result_rejected').length,
    },
  };
}

export interface WorkerTaskCounts {
  /** Queue steps checked (one a run). */
  steps: number;
  /** Tasks given up when their worker was lost (worker_task status orphaned). */
  orphaned: number;
  /** Attempts failed WORKER_LOST. */
  workerLost: number;
  /** Results refused because their task was orphaned (worker_task.late_results, summed). */
  lateRefused: number;
  /** Those refusals as the workers saw them (TASK_ORPHANED in their own lines). */
  refusedSeen: number;
}

/**
 * Per-id accounting of the queue step `stepId` of `runIds` (runs that must all succeed): exactly
 * one succeeded attempt and one succeeded worker_task row, at the same attempt; its outputs name
 * the run, the step, that attempt and the worker the task row names; that worker's own lines have
 * handled it; every orphaned task's attempt failed WORKER_LOST.
 */
export async function checkWorkerTasks(
  db: pg.Client,
  runIds: string[],
  stepId: string,
  lines: WorkerLine[],
): Promise<{ violations: string[]; counts: WorkerTaskCounts }> {
  const violations: string[] = [];
  const add = (name: string, examples: string[]) => {
    if (examples.length > 0) violations.push(`${name}: ${examples.length} (e.g. ${examples.slice(0, 3).join('; ')})`);
  };
  const attempts = (
    await db.query<{ run_id: string; attempt: number; status: string; code: string | null }>(
      `select run_id, attempt, status, error->>'code' as code from attempt where run_id = any($1::uuid[]) and step_id = $2`,
      [runIds, stepId],
    )
  ).rows;
  const tasks = (
    await db.query<{ run_id: string; attempt: number; status: string; worker: string | null; late_results: number }>(
      `select t.run_id, t.attempt, t.status, w.name as worker, t.late_results
         from worker_task t left join worker w on w.tenant_id = t.tenant_id and w.worker_id = t.worker_id
        where t.run_id = any($1::uuid[]) and t.step_id = $2`,
      [runIds, stepId],
    )
  ).rows;
  const outputs = new Map(
    (
      await db.query<{ run_id: string; outputs: Record<string, unknown> | null }>(
        `select run_id, outputs from step where run_id = any($1::uuid[]) and step_id = $2`,
        [runIds, stepId],
      )
    ).rows.map((r) => [r.run_id, r.outputs]),
  );
  const handled = new Set(
    lines.filter((l) => l.kind === 'handled').map((l) => `${l.worker} ${l.runId} ${l.stepId} ${l.attempt}`),
  );

  const notOne: string[] = [];
  const taskNotOne: string[] = [];
  const mismatch: string[] = [];
  const unhandled: string[] = [];
  for (const runId of runIds) {
    const ok = attempts.filter((a) => a.run_id === runId && a.status === 'succeeded');
    const okTasks = tasks.filter((t) => t.run_id === runId && t.status === 'succeeded');
    if (ok.length !== 1) notOne.push(`${runId} ×${ok.length}`);
    if (okTasks.length !== 1) taskNotOne.push(`${runId} ×${okTasks.length}`);
    if (ok.length !== 1 || okTasks.length !== 1) continue;
    const [a, t] = [ok[0], okTasks[0]];
    const out = outputs.get(runId);
    if (
      t.attempt !== a.attempt ||
      out?.runId !== runId ||
      out?.stepId !== stepId ||
      out?.attempt !== a.attempt ||
      out?.worker !== t.worker
    )
      mismatch.push(`${runId} attempt ${a.attempt}, task attempt ${t.attempt} of ${t.worker}: ${JSON.stringify(out)}`);
    else if (!handled.has(`${t.worker} ${runId} ${stepId} ${a.attempt}`))
      unhandled.push(`${runId} attempt ${a.attempt} by ${t.worker}`);
  }
  const orphaned = tasks.filter((t) => t.status === 'orphaned');
  const notLost = orphaned
    .filter((t) => !attempts.some((a) => a.run_id === t.run_id && a.attempt === t.attempt && a.code === 'WORKER_LOST'))
    .map((t) => `${t.run_id} attempt ${t.attempt}`);
  add('each queue step exactly one succeeded attempt', notOne);
  add('each queue step exactly one succeeded worker task', taskNotOne);
  add("the success's outputs name its run, step, attempt and worker", mismatch);
  add('each success handled by the worker it names (its own lines)', unhandled);
  add('each orphaned task failed its attempt WORKER_LOST', notLost);
  return {
    violations,
    counts: {
      steps: runIds.length,
      orphaned: orphaned.length,
      workerLost: attempts.filter((a) => a.code === 'WORKER_LOST').length,
      lateRefused: tasks.reduce((n, t) => n + t.late_results, 0),
      refusedSeen: lines.filter((l) => l.kind === 'refused' && l.code === 'TASK_ORPHANED' && l.stepId === stepId)
        .length,
    },
  };
}

/**
 * The engine's timers (graphile-worker jobs: retry backoffs, webhooks) are being run: none is due
 * for more than `lateS` seconds without being taken, or held that long (the engine's jobs take
 * seconds; one held longer sits with a runner that has stopped).
 */
export async function checkTimers(db: pg.Client, lateS = 60): Promise<string[]> {
  const r = await db.query<{ waiting: number; held: number; oldest: string | null }>(
    `select count(*) filter (where locked_at is null)::int as waiting, count(*) filter (where locked_at is not null)::int as held,
            min(run_at)::text as oldest
       from graphile_worker._private_jobs
      where run_at < now() - make_interval(secs => $1) and attempts < max_attempts
        and (locked_at is null or locked_at < now() - make_interval(secs => $1))`,
    [lateS],
  );
  const { waiting, held, oldest } = r.rows[0];
  return waiting + held > 0
    ? [
        `engine timers run (no job due for more than ${lateS} s): ${waiting} job(s) waiting, ${held} held by a runner for more than ${lateS} s, oldest due ${oldest}`,
      ]
    : [];
}

/** Each fire time of the schedule, second by second, has exactly one fire and one run. */
export async function checkSchedule(db: pg.Client, scheduleId: string): Promise<string[]> {
  const fires = (
    await db.query<{ fire_time: Date; outcome: string; run_id: string | null }>(
      `select fire_time, outcome, run_id from schedule_fire where schedule_id = $1 order by fire_time`,
      [scheduleId],
    )
  ).rows;
  const runs = (
    await db.query<{ run_token: string; run_id: string }>(`select run_token, run_id from run where run_token like $1`, [
      `schedule:${scheduleId}:%`,
    ])
  ).rows;
  const problems: string[] = [];
  if (fires.length === 0) problems.push('no fire at all');
  for (let i = 1; i < fires.length; i++) {
    const gap = fires[i].fire_time.getTime() - fires[i - 1].fire_time.getTime();
    if (gap !== 1000) problems.push(`${fires[i - 1].fire_time.toISOString()} → ${fires[i].fire_time.toISOString()}`);
  }
  const runByToken = new Map<string, string[]>();
  for (const r of runs) runByToken.set(r.run_token, [...(runByToken.get(r.run_token) ?? []), r.run_id]);
  for (const f of fires) {
    const token = `schedule:${scheduleId}:${f.fire_time.toISOString()}`;
    const got = runByToken.get(token) ?? [];
    if (f.outcome !== 'created' || got.length !== 1 || got[0] !== f.run_id)
      problems.push(`${f.fire_time.toISOString()}: ${f.outcome}, ${got.length} run(s)`);
  }
  if (runs.length !== fires.length) problems.push(`${runs.length} runs for ${fires.length} fires`);
  return problems.length > 0
    ? [`each scheduled fire time exactly one run: ${problems.length} (e.g. ${problems.slice(0, 3).join('; ')})`]
    : [];
}

/** Completed runs per second of finish time, from `since`. */
export async function throughput(db: pg.Client, sinceIso: string): Promise<Map<number, number>> {
  const rows = (
    await db.query<{ s: number; n: number }>(
      `select floor(extract(epoch from finished_at))::bigint as s, count(*)::int as n
         from run where created_at >= $1 and finished_at is not null group by 1`,
      [sinceIso],
    )
  ).rows;
  return new Map(rows.map((r) => [Number(r.s), r.n]));
}

function sortKeys(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(sortKeys);
  if (v && typeof v === 'object')
    return Object.fromEntries(
      Object.keys(v)
        .sort()
        .map((k) => [k, sortKeys((v as Record<string, unknown>)[k])]),
    );
  return v;
}
