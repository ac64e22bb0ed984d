import { Injectable, Logger, type OnApplicationBootstrap, type OnModuleDestroy } from '@nestjs/common';
import { Database } from '../../core/database/database';
import type { SystemTx } from '../../core/database/handles';
import { PgListener } from '../../core/database/pg-listener';
import { DomainError } from '../../core/errors/domain-error';
import { QUOTA_EXCEEDED } from '../plans/quota-exceeded';
import { Clock } from './clock';
import { MISFIRE_GRACE_MS, planFires } from './fire-plan';
import { ScheduleRunner, scheduleRunToken, type ScheduledRunRequest } from './schedule-runner';
import { SchedulesRepository, type FireOutcome, type ScheduleRecord } from './schedules.repository';

/** Longest real sleep between scans: schedule changes made while a NOTIFY is lost are seen by then. */
export const MAX_SLEEP_MS = 5_000;
const SCAN_LIMIT = 100;
const CONTENDED_SLEEP_MS = 100;
export const SCHEDULE_CHANNEL = 'ordo_schedule_changed';

export interface TickResult {
  claimed: number;
  fires: number;
}

interface FireRow {
  fireTime: Date;
  runId: string | null;
  outcome: FireOutcome;
  error: string | null;
}

/**
 * The scheduler role's loop. Every process runs one; they coordinate only through the database:
 * a schedule's due work is claimed with a row lock (SKIP LOCKED), handled, and its next fire time
 * saved in the same system transaction, so two processes never both act on one fire time, and a
 * process that dies mid-way leaves the fire to the next claimer, whose createRun returns the same
 * run (the run token is deterministic).
 */
@Injectable()
export class SchedulerLoop implements OnApplicationBootstrap, OnModuleDestroy {
  private readonly log = new Logger('scheduler');
  private running = false;
  private wake: (() => void) | undefined;
  private loopDone: Promise<void> | undefined;
  private readonly listener: PgListener;
  private graceMs = MISFIRE_GRACE_MS;

  constructor(
    private readonly db: Database,
    private readonly repo: SchedulesRepository,
    private readonly runner: ScheduleRunner,
    private readonly clock: Clock,
  ) {
    // Without notifications the bounded sleep still picks changes up.
    this.listener = new PgListener({
      url: db.urls.system,
      applicationName: 'ordo:scheduler:listen',
      channels: [SCHEDULE_CHANNEL],
      onNotification: () => this.wake?.(),
      log: this.log,
    });
  }

  async onApplicationBootstrap(): Promise<void> {
    await this.start();
  }

  // The earliest shutdown hook: the loop ends before the database handles are closed.
  async onModuleDestroy(): Promise<void> {
    await this.stop();
  }

  /** Test hook: the lateness after which a fire counts as missed. */
  setMisfireGrace(ms: number): void {
    this.graceMs = ms;
  }

  async start(): Promise<void> {
    if (this.running) return;
    this.running = true;
    await this.listener.start();
    this.loopDone = this.loop();
  }

  async stop(): Promise<void> {
    if (!this.running) return;
    this.running = false;
    this.wake?.();
    await this.loopDone;
    await this.listener.stop();
  }

  private async loop(): Promise<void> {
    while (this.running) {
      let sleepMs = MAX_SLEEP_MS;
      try {
        const done = await this.tick();
        const next = await this.repo.systemEarliestNextFire(this.db.system);
        if (next) {
          const wait = this.clock.realDelay(next.getTime() - this.clock.now().getTime());
          // Overdue work this process could not claim is being handled by another one: poll gently.
          sleepMs = Math.min(MAX_SLEEP_MS, Math.max(wait, done.claimed === 0 && wait <= 0 ? CONTENDED_SLEEP_MS : 0));
        }
      } catch (e) {
        // A tick cut short by shutdown rolls back; the next process to claim the schedule redoes it.
        if (!this.running) break;
        this.log.error(`scheduler tick failed: ${(e as Error).message}`);
        sleepMs = 1000;
      }
      if (!this.running) break;
      await new Promise<void>((resolve) => {
        const timer = setTimeout(done, sleepMs);
        function done() {
          clearTimeout(timer);
          resolve();
        }
        this.wake = done;
      });
      this.wake = undefined;
    }
  }

  /** One scan: claims and handles every schedule with work due at the clock's now. */
  async tick(): Promise<TickResult> {
    const now = this.clock.now();
    const due = await this.repo.systemFindDue(this.db.system, now, SCAN_LIMIT);
    let claimed = 0;
    let fires = 0;
    for (const d of due) {
      const n = await this.db.withSystem((tx) => this.handle(tx, d.tenantId, d.id, now));
      if (n !== undefined) {
        claimed++;
        fires += n;
      }
    }
    return { claimed, fires };
  }

  /** Handles one claimed schedule; undefined when another process holds it. */
  private async handle(tx: SystemTx, tenantId: string, id: string, now: Date): Promise<number | undefined> {
    const s = await this.repo.systemClaim(tx, tenantId, id);
    if (!s) return undefined;
    const rows: FireRow[] = [];
    let queuedFireAt = s.queuedFireAt;
    let lastRunId = s.lastRunId;
    let lastFireAt = s.lastFireAt;

    // A queued fire starts once the previous run has ended.
    if (queuedFireAt !== null && !(lastRunId !== null && (await this.runner.isActive(tenantId, lastRunId)))) {
      const r = await this.create(s, queuedFireAt);
      rows.push(r);
      if (r.runId) lastRunId = r.runId;
      queuedFireAt = null;
    }

    const plan = planFires(s, now, this.graceMs);
    if (plan.droppedMissed)
      this.log.warn(`schedule ${tenantId}/${id}: missed fire times dropped (catchUp=${s.catchUp})`);
    // overlap = allow: the runs of all due fires are created in one call (one transaction).
    const batch = s.overlap === 'allow' && plan.fires.length > 1 ? await this.createAll(s, plan.fires) : undefined;
    for (const fireTime of plan.fires) {
      const previousActive =
        s.overlap !== 'allow' && lastRunId !== null ? await this.runner.isActive(tenantId, lastRunId) : false;
      let row: FireRow;
      switch (s.overlap) {
        case 'allow':
          row = batch?.get(fireTime.getTime()) ?? (await this.create(s, fireTime));
          break;
        case 'skip':
          row = previousActive
            ? { fireTime, runId: null, outcome: 'skipped', error: 'previous run still active' }
            : await this.create(s, fireTime);
          break;
        case 'queue':
          if (queuedFireAt !== null) {
            row = {
              fireTime,
              runId: null,
              outcome: 'skipped',
              error: `a fire (${queuedFireAt.toISOString()}) is already queued`,
            };
          } else if (previousActive) {
            row = { fireTime, runId: null, outcome: 'queued', error: null };
            queuedFireAt = fireTime;
          } else {
            row = await this.create(s, fireTime);
          }
          break;
        case 'cancel-previous':
          if (previousActive && lastRunId !== null) {
            await this.runner.cancel(
              tenantId,
              lastRunId,
              `superseded by schedule ${id} fire ${fireTime.toISOString()}`,
            );
            row = await this.create(s, fireTime);
            if (row.outcome === 'created') row.outcome = 'cancelled-previous';
          } else {
            row = await this.create(s, fireTime);
          }
          break;
      }
      rows.push(row);
      if (row.runId) lastRunId = row.runId;
      lastFireAt = fireTime;
    }
    await this.repo.systemRecordFires(tx, tenantId, id, rows);
    await this.repo.systemSaveProgress(tx, tenantId, id, {
      nextFireAt: plan.nextFireAt,
      queuedFireAt,
      lastRunId,
      lastFireAt,
    });
    const last = rows.at(-1);
    if (last)
      this.log.debug(`schedule ${tenantId}/${id}: handled ${rows.length} fire(s) up to ${last.fireTime.toISOString()}`);
    return rows.length;
  }

  /** Creates the runs of several fires at once; undefined when refused (then they go one by one). */
  private async createAll(s: ScheduleRecord, fireTimes: Date[]): Promise<Map<number, FireRow> | undefined> {
    try {
      const created = await this.runner.createRuns(
        s.tenantId,
        fireTimes.map((t) => this.request(s, t)),
      );
      return new Map(
        fireTimes.map((fireTime, i) => [
          fireTime.getTime(),
          { fireTime, runId: created[i].runId, outcome: 'created', error: null },
        ]),
      );
    } catch (e) {
      if (e instanceof DomainError && e.status < 500) return undefined;
      throw e;
    }
  }

  private request(s: ScheduleRecord, fireTime: Date): ScheduledRunRequest {
    return {
      dagId: s.dagId,
      ...(s.dagVersion !== null && { version: s.dagVersion }),
      inputs: s.inputs,
      runToken: scheduleRunToken(s.id, fireTime),
      requestedBy: `schedule:${s.id}`,
    };
  }

  /**
   * Creates the run of one fire; a refusal by the runs module (e.g. the DAG is gone) is recorded, not
   * retried. A fire over the tenant's plan's quota is a skipped fire, its error naming the limit.
   */
  private async create(s: ScheduleRecord, fireTime: Date): Promise<FireRow> {
    try {
      const r = await this.runner.createRun(s.tenantId, this.request(s, fireTime));
      return { fireTime, runId: r.runId, outcome: 'created', error: null };
    } catch (e) {
      if (e instanceof DomainError && e.code === QUOTA_EXCEEDED) {
        return { fireTime, runId: null, outcome: 'skipped', error: `${e.code}: ${e.message}` };
      }
      if (e instanceof DomainError && e.status < 500) {
        return { fireTime, runId: null, outcome: 'failed', error: `${e.code}: ${e.message}` };
      }
      throw e;
    }
  }
}
