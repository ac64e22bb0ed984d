import path from 'node:path';
import type pg from 'pg';
import { sleep, type Cluster } from './cluster';
import { compileWorkerScript, Fleet, type ExternalWorker } from './fleet';
import { checkWorkerTasks } from './invariants';
import { WORKER_POOL, type Api, type Submitted, type Tenant } from './workload';

/**
 * The external-worker cell's parts: three SDK workers of one tenant's `chaos` pool as separate
 * processes; the fault SIGKILLs the worker holding the most delivered tasks (a replacement starts at
 * once), then SIGSTOPs the last one while its handlers run, past its TTL, and SIGCONTs it, so the
 * tasks it held are orphaned and the results it posts on waking are refused; the check does the
 * per-id accounting.
 */

export interface WorkerCellOptions {
  cluster: Cluster;
  api: Api;
  db: () => Promise<pg.Client>;
  tenant: Tenant;
  ttlMs: number;
  sweepMs: number;
  /** How each of the three workers pulls its tasks; the paused one is the last. */
  transports: ExternalWorker['transport'][];
  sleepMs: [number, number];
}

interface Ctx {
  notes: string[];
  violations: string[];
}

export class WorkerCell {
  private fleet?: Fleet;
  private seq = 0;

  constructor(private readonly opts: WorkerCellOptions) {}

  /** Mints the pool's worker token and starts the workers (each registered before this resolves). */
  async setup(): Promise<void> {
    const t = this.opts.tenant;
    const minted = await this.opts.api.persist(
      'POST',
      '/api/v1/tokens',
      { token: t.token, tenant: t.id, body: { scopes: ['worker'], pool: WORKER_POOL, subject: 'chaos-fleet' } },
      Date.now() + 60_000,
    );
    if (minted.status !== 201) throw new Error(`mint worker token: ${minted.status} ${JSON.stringify(minted.body)}`);
    compileWorkerScript();
    this.fleet = new Fleet({
      urls: this.opts.cluster.live('api').map((p) => p.url),
      tenant: t.id,
      token: minted.body.token as string,
      pool: WORKER_POOL,
      dir: path.join(this.opts.cluster.home, 'external-workers'),
      sleepMs: this.opts.sleepMs,
    });
    await Promise.all(this.opts.transports.map((kind) => this.fleet!.start(this.nextName(), kind)));
  }

  async fault(ctx: Ctx): Promise<void> {
    const fleet = this.fleet!;
    const [first, ...rest] = fleet.live();
    // SIGKILL mid-task: the worker holding the most delivered tasks among all but the one paused next.
    const victim = await this.busiest([first, ...rest.slice(0, -1)]);
    victim.w.child.kill('SIGKILL');
    await victim.w.exited;
    ctx.notes.push(`SIGKILL ${victim.w.name} (${victim.w.transport}) holding ${victim.held} delivered task(s)`);
    await fleet.start(this.nextName(), victim.w.transport);

    // SIGSTOP while its handlers run: their sleeps end during the pause, so it posts their results on waking.
    const paused = await this.running(rest[rest.length - 1]);
    const workerId = this.workerIds(paused.w).at(-1);
    paused.w.child.kill('SIGSTOP');
    const t0 = Date.now();
    // Paused until the server has marked it offline and one more sweep ran (bounded: twice the TTL and a few sweeps).
    let offlineAfter: number | null = null;
    while (Date.now() - t0 < 2 * this.opts.ttlMs + 4 * this.opts.sweepMs) {
      const r = await (
        await this.opts.db()
      ).query<{ n: number }>(`select count(*)::int as n from worker where worker_id = $1 and status = 'offline'`, [
        workerId,
      ]);
      if (r.rows[0].n > 0) {
        offlineAfter ??= Date.now() - t0;
        if (Date.now() - t0 > offlineAfter + 2 * this.opts.sweepMs) break;
      }
      await sleep(250);
    }
    paused.w.child.kill('SIGCONT');
    const pausedS = ((Date.now() - t0) / 1000).toFixed(1);
    ctx.notes.push(
      `SIGSTOP ${paused.w.name} (${paused.w.transport}) running ${paused.held} task(s) for ${pausedS} s, ` +
        (offlineAfter === null ? 'never marked offline' : `offline after ${(offlineAfter / 1000).toFixed(1)} s`),
    );
    if (offlineAfter === null)
      ctx.violations.push(
        `a worker paused past its TTL is marked offline: ${paused.w.name} still online after ${pausedS} s`,
      );
    // The woken worker posts what it held, learns it is offline and registers again.
    await sleep(3_000);
    if (!paused.w.alive())
      ctx.violations.push(`the resumed worker keeps running: ${paused.w.stderrTail().slice(-300)}`);
  }

  /** Per-id accounting of the cell's queue steps; adds its figures to the notes. */
  async check(db: pg.Client, submitted: Submitted[], ctx: Ctx): Promise<void> {
    const runIds = submitted.filter((s) => s.kind === 'queue' && s.runId).map((s) => s.runId!);
    const lines = this.fleet!.lines();
    const c = { steps: 0, orphaned: 0, workerLost: 0, lateRefused: 0, refusedSeen: 0 };
    for (const stepId of ['work', 'relay']) {
      const r = await checkWorkerTasks(db, runIds, stepId, lines);
      ctx.violations.push(...r.violations.map((v) => `${stepId}: ${v}`));
      for (const k of Object.keys(c) as (keyof typeof c)[]) c[k] += r.counts[k];
    }
    ctx.notes.push(
      `${c.steps} queue steps; orphaned ${c.orphaned} (${c.workerLost} attempts WORKER_LOST); late results refused ${c.lateRefused} (${c.refusedSeen} seen by the workers)`,
    );
    if (c.orphaned === 0) ctx.violations.push('tasks of the lost workers orphaned (none)');
    if (c.lateRefused === 0)
      ctx.violations.push('late results of the paused worker refused (worker_task.late_results 0)');
  }

  /** SIGTERM drains every worker; one not gone within 15 s is killed and reported. */
  async teardown(ctx: Ctx): Promise<void> {
    if (!this.fleet) return;
    const slow = await this.fleet.stopAll();
    if (slow.length > 0) ctx.violations.push(`every external worker drains within 15 s of SIGTERM: ${slow.join(', ')}`);
  }

  killAll(): void {
    this.fleet?.killAll();
  }

  private nextName(): string {
    return `chaos-worker-${++this.seq}`;
  }

  /** The worker ids a process registered under (it registers again after it was lost). */
  private workerIds(w: ExternalWorker): string[] {
    return this.fleet!.lines()
      .filter((l) => l.kind === 'registered' && l.worker === w.name && l.workerId)
      .map((l) => l.workerId!);
  }

  /** `w` once its handlers run two tasks (bounded: after 5 s one will do, after 10 s none). */
  private async running(w: ExternalWorker): Promise<{ w: ExternalWorker; held: number }> {
    const t0 = Date.now();
    for (;;) {
      const held = this.fleet!.running(w);
      const want = Date.now() - t0 < 5_000 ? 2 : 1;
      if (held >= want || Date.now() - t0 > 10_000) return { w, held };
      await sleep(20);
    }
  }

  /** Of `candidates`, the one holding the most delivered tasks (worker_task); waits (bounded) until one holds some. */
  private async busiest(candidates: ExternalWorker[]): Promise<{ w: ExternalWorker; held: number }> {
    const deadline = Date.now() + 10_000;
    for (;;) {
      const rows = (
        await (
          await this.opts.db()
        ).query<{ worker_id: string; n: number }>(
          `select worker_id::text, count(*)::int as n from worker_task where status = 'delivered' group by worker_id`,
        )
      ).rows;
      let best = { w: candidates[0], held: 0 };
      for (const w of candidates) {
        const ids = new Set(this.workerIds(w));
        const held = rows.filter((r) => ids.has(r.worker_id)).reduce((a, r) => a + r.n, 0);
        if (held > best.held) best = { w, held };
      }
      if (best.held > 0 || Date.now() > deadline) return best;
      await sleep(50);
    }
  }
}
