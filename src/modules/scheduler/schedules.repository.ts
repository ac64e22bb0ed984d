import { Injectable } from '@nestjs/common';
import { sql, type ExpressionBuilder, type Selectable } from 'kysely';
import type { DB, Schedule as ScheduleTable } from '../../core/database/db.generated';
import { tenantOf, type SystemDb, type SystemTx, type TenantTx } from '../../core/database/handles';

export type CatchUp = 'none' | 'latest' | 'all';
export type Overlap = 'allow' | 'skip' | 'queue' | 'cancel-previous';
export type FireOutcome = 'created' | 'skipped' | 'queued' | 'cancelled-previous' | 'failed';

export interface ScheduleRecord {
  tenantId: string;
  id: string;
  dagId: string;
  dagVersion: number | null;
  cron: string;
  timezone: string;
  inputs: Record<string, unknown>;
  catchUp: CatchUp;
  overlap: Overlap;
  paused: boolean;
  nextFireAt: Date | null;
  queuedFireAt: Date | null;
  lastRunId: string | null;
  lastFireAt: Date | null;
  createdBy: string;
  createdAt: Date;
  updatedAt: Date;
}

export interface NewSchedule {
  id: string;
  dagId: string;
  dagVersion: number | null;
  cron: string;
  timezone: string;
  inputs: Record<string, unknown>;
  catchUp: CatchUp;
  overlap: Overlap;
  paused: boolean;
  nextFireAt: Date | null;
  createdBy: string;
}

export type ScheduleChanges = Partial<
  Pick<
    NewSchedule,
    'dagId' | 'dagVersion' | 'cron' | 'timezone' | 'inputs' | 'catchUp' | 'overlap' | 'paused' | 'nextFireAt'
  >
>;

/** The scheduler's bookkeeping after handling a schedule's due fires. */
export interface ScheduleProgress {
  nextFireAt: Date | null;
  queuedFireAt: Date | null;
  lastRunId: string | null;
  lastFireAt: Date | null;
}

export interface FireRecord {
  fireTime: Date;
  runId: string | null;
  outcome: FireOutcome;
  error: string | null;
  firedAt: Date;
}

const COLUMNS = [
  'tenant_id',
  'id',
  'dag_id',
  'dag_version',
  'cron',
  'timezone',
  'inputs',
  'catch_up',
  'overlap',
  'paused',
  'next_fire_at',
  'queued_fire_at',
  'last_run_id',
  'last_fire_at',
  'created_by',
  'created_at',
  'updated_at',
] as const;

type Row = Pick<Selectable<ScheduleTable>, (typeof COLUMNS)[number]>;

const date = (v: unknown): Date => new Date(v as string | Date);
const dateOrNull = (v: unknown): Date | null => (v === null ? null : date(v));

function toRecord(r: Row): ScheduleRecord {
  return {
    tenantId: r.tenant_id,
    id: r.id,
    dagId: r.dag_id,
    dagVersion: r.dag_version,
    cron: r.cron,
    timezone: r.timezone,
    inputs: r.inputs as Record<string, unknown>,
    catchUp: r.catch_up as CatchUp,
    overlap: r.overlap as Overlap,
    paused: r.paused,
    nextFireAt: dateOrNull(r.next_fire_at),
    queuedFireAt: dateOrNull(r.queued_fire_at),
    lastRunId: r.last_run_id,
    lastFireAt: dateOrNull(r.last_fire_at),
    createdBy: r.created_by,
    createdAt: date(r.created_at),
    updatedAt: date(r.updated_at),
  };
}

function changesToRow(c: ScheduleChanges) {
  return {
    ...(c.dagId !== undefined && { dag_id: c.dagId }),
    ...(c.dagVersion !== undefined && { dag_version: c.dagVersion }),
    ...(c.cron !== undefined && { cron: c.cron }),
    ...(c.timezone !== undefined && { timezone: c.timezone }),
    ...(c.inputs !== undefined && { inputs: JSON.stringify(c.inputs) }),
    ...(c.catchUp !== undefined && { catch_up: c.catchUp }),
    ...(c.overlap !== undefined && { overlap: c.overlap }),
    ...(c.paused !== undefined && { paused: c.paused }),
    ...(c.nextFireAt !== undefined && { next_fire_at: c.nextFireAt }),
  };
}

/** A disabled tenant's schedules do not fire (they resume, under their catch-up policy, when it is enabled). */
const tenantActive = (eb: ExpressionBuilder<DB, 'schedule'>) =>
  eb.exists(
    eb
      .selectFrom('tenant')
      .select(sql`1`.as('one'))
      .whereRef('tenant.id', '=', 'schedule.tenant_id')
      .where('tenant.status', '=', 'active'),
  );

/**
 * Schedules and their fire records. Request-side methods take a tenant transaction; the
 * scheduler's cross-tenant scan and claims take the system handle and say so in their names.
 */
@Injectable()
export class SchedulesRepository {
  async insert(tx: TenantTx, s: NewSchedule): Promise<ScheduleRecord> {
    const row = await tx
      .insertInto('schedule')
      .values({
        tenant_id: tenantOf(tx),
        id: s.id,
        dag_id: s.dagId,
        dag_version: s.dagVersion,
        cron: s.cron,
        timezone: s.timezone,
        inputs: JSON.stringify(s.inputs),
        catch_up: s.catchUp,
        overlap: s.overlap,
        paused: s.paused,
        next_fire_at: s.nextFireAt,
        created_by: s.createdBy,
      })
      .returning([...COLUMNS])
      .executeTakeFirstOrThrow();
    return toRecord(row);
  }

  async find(tx: TenantTx, id: string, opts: { forUpdate?: boolean } = {}): Promise<ScheduleRecord | undefined> {
    let q = tx
      .selectFrom('schedule')
      .select([...COLUMNS])
      .where('tenant_id', '=', tenantOf(tx))
      .where('id', '=', id);
    if (opts.forUpdate) q = q.forUpdate();
    const row = await q.executeTakeFirst();
    return row && toRecord(row);
  }

  /** Schedules ordered by (created_at, id), after the keyset `after`. */
  async list(
    tx: TenantTx,
    q: { limit: number; after?: { createdAt: string; id: string }; dagId?: string },
  ): Promise<ScheduleRecord[]> {
    let query = tx
      .selectFrom('schedule')
      .select([...COLUMNS])
      .where('tenant_id', '=', tenantOf(tx));
    if (q.dagId !== undefined) query = query.where('dag_id', '=', q.dagId);
    const after = q.after;
    if (after !== undefined) {
      query = query.where(sql<boolean>`(created_at, id) > (${after.createdAt}::timestamptz, ${after.id}::uuid)`);
    }
    const rows = await query.orderBy('created_at').orderBy('id').limit(q.limit).execute();
    return rows.map(toRecord);
  }

  async update(tx: TenantTx, id: string, c: ScheduleChanges): Promise<ScheduleRecord | undefined> {
    const row = await tx
      .updateTable('schedule')
      .set({ ...changesToRow(c), updated_at: sql<Date>`now()` })
      .where('tenant_id', '=', tenantOf(tx))
      .where('id', '=', id)
      .returning([...COLUMNS])
      .executeTakeFirst();
    return row && toRecord(row);
  }

  async delete(tx: TenantTx, id: string): Promise<boolean> {
    const r = await tx
      .deleteFrom('schedule')
      .where('tenant_id', '=', tenantOf(tx))
      .where('id', '=', id)
      .executeTakeFirst();
    return Number(r.numDeletedRows) > 0;
  }

  /** The most recent fires of a schedule, newest first. */
  async fires(tx: TenantTx, scheduleId: string, limit: number): Promise<FireRecord[]> {
    const rows = await tx
      .selectFrom('schedule_fire')
      .select(['fire_time', 'run_id', 'outcome', 'error', 'fired_at'])
      .where('tenant_id', '=', tenantOf(tx))
      .where('schedule_id', '=', scheduleId)
      .orderBy('fire_time', 'desc')
      .limit(limit)
      .execute();
    return rows.map((r) => ({
      fireTime: date(r.fire_time),
      runId: r.run_id,
      outcome: r.outcome as FireOutcome,
      error: r.error,
      firedAt: date(r.fired_at),
    }));
  }

  // ---- scheduler (system handle, cross-tenant) ------------------------------------------------

  /** Cross-tenant scan: schedules with work due at `now` (a fire time reached, or a queued fire). */
  async systemFindDue(db: SystemDb, now: Date, limit: number): Promise<{ tenantId: string; id: string }[]> {
    const due = db
      .selectFrom('schedule')
      .select(['tenant_id', 'id', 'next_fire_at as at'])
      .where('paused', '=', false)
      .where('next_fire_at', '<=', now)
      .where(tenantActive);
    const queued = db
      .selectFrom('schedule')
      .select(['tenant_id', 'id', 'queued_fire_at as at'])
      .where('paused', '=', false)
      .where('queued_fire_at', 'is not', null)
      .where(tenantActive);
    const rows = await db
      .selectFrom(due.unionAll(queued).as('w'))
      .select(['tenant_id', 'id'])
      .groupBy(['tenant_id', 'id'])
      .orderBy(sql`min(at)`)
      .limit(limit)
      .execute();
    return rows.map((r) => ({ tenantId: r.tenant_id, id: r.id }));
  }

  /** Cross-tenant: the earliest pending fire time of any active schedule. */
  async systemEarliestNextFire(db: SystemDb): Promise<Date | undefined> {
    const r = await db
      .selectFrom('schedule')
      .select((eb) => eb.fn.min('next_fire_at').as('at'))
      .where('paused', '=', false)
      .where(tenantActive)
      .executeTakeFirst();
    return r?.at == null ? undefined : date(r.at);
  }

  /**
   * Claims one schedule for the rest of the system transaction (row lock, SKIP LOCKED): undefined
   * when another scheduler holds it or it is paused or gone. Two processes never both act on it.
   */
  async systemClaim(tx: SystemTx, tenantId: string, id: string): Promise<ScheduleRecord | undefined> {
    const row = await tx
      .selectFrom('schedule')
      .select([...COLUMNS])
      .where('tenant_id', '=', tenantId)
      .where('id', '=', id)
      .where('paused', '=', false)
      .where(tenantActive)
      .forUpdate()
      .skipLocked()
      .executeTakeFirst();
    return row && toRecord(row);
  }

  async systemSaveProgress(tx: SystemTx, tenantId: string, id: string, p: ScheduleProgress): Promise<void> {
    await tx
      .updateTable('schedule')
      .set({
        next_fire_at: p.nextFireAt,
        queued_fire_at: p.queuedFireAt,
        last_run_id: p.lastRunId,
        last_fire_at: p.lastFireAt,
      })
      .where('tenant_id', '=', tenantId)
      .where('id', '=', id)
      .execute();
  }

  /** Records fires in one statement; a fire time already recorded keeps its row unless `replace`. */
  async systemRecordFires(
    tx: SystemTx,
    tenantId: string,
    scheduleId: string,
    fires: { fireTime: Date; runId: string | null; outcome: FireOutcome; error: string | null }[],
  ): Promise<void> {
    if (fires.length === 0) return;
    await tx
      .insertInto('schedule_fire')
      .values(
        fires.map((f) => ({
          tenant_id: tenantId,
          schedule_id: scheduleId,
          fire_time: f.fireTime,
          run_id: f.runId,
          outcome: f.outcome,
          error: f.error,
        })),
      )
      .onConflict((oc) =>
        oc
          .columns(['tenant_id', 'schedule_id', 'fire_time'])
          .doUpdateSet((eb) => ({
            run_id: eb.ref('excluded.run_id'),
            outcome: eb.ref('excluded.outcome'),
            error: eb.ref('excluded.error'),
          }))
          // Only a queued fire is ever resolved later; any other recorded outcome is final.
          .where('schedule_fire.outcome', '=', 'queued'),
      )
      .execute();
  }
}
