import { Injectable } from '@nestjs/common';
import { randomUUID } from 'node:crypto';
import { Database } from '../../core/database/database';
import type { TenantTx } from '../../core/database/handles';
import { badRequest, conflict, DomainError, notFound } from '../../core/errors/domain-error';
import { decodePageToken, encodePageToken } from '../../core/http/page-token';
import type { TenantPrincipalT } from '../../core/http/request-context';
import { DagsRepository } from '../dags/dags.repository';
import { compileInputSchema } from '../dags/input-schema';
import { Clock } from './clock';
import { lastFireTimeBetween, nextFireTimes, previewFireTimes, validateCron } from './cron';
import type { CreateScheduleBody, ScheduleDto, UpdateScheduleBody } from './schedules.dto';
import { SchedulesRepository, type ScheduleChanges, type ScheduleRecord } from './schedules.repository';

const isAfter = (v: unknown): v is { createdAt: string; id: string } =>
  typeof v === 'object' &&
  v !== null &&
  typeof (v as { createdAt: unknown }).createdAt === 'string' &&
  typeof (v as { id: unknown }).id === 'string' &&
  !Number.isNaN(Date.parse((v as { createdAt: string }).createdAt)) &&
  /^[0-9a-f-]{36}$/i.test((v as { id: string }).id);

/** Schedule definitions: validation, DAG checks, and the first fire time after each change. */
@Injectable()
export class SchedulesService {
  constructor(
    private readonly db: Database,
    private readonly repo: SchedulesRepository,
    private readonly dags: DagsRepository,
    private readonly clock: Clock,
  ) {}

  async create(p: TenantPrincipalT, body: CreateScheduleBody): Promise<ScheduleDto> {
    const now = this.clock.now();
    validateCron(body.cron, body.timezone, now);
    const row = await this.db.withTenant(p.tenantId, async (tx) => {
      await this.assertDag(tx, body.dagId, body.version, body.inputs);
      return this.repo.insert(tx, {
        id: randomUUID(),
        dagId: body.dagId,
        dagVersion: body.version ?? null,
        cron: body.cron,
        timezone: body.timezone,
        inputs: body.inputs,
        catchUp: body.catchUp,
        overlap: body.overlap,
        paused: body.paused,
        nextFireAt: firstFireAfter(body.cron, body.timezone, now),
        createdBy: p.subject,
      });
    });
    return toDto(row);
  }

  async list(p: TenantPrincipalT, q: { limit: number; pageToken?: string; dagId?: string }) {
    const after = decodePageToken(q.pageToken, isAfter);
    const rows = await this.db.withTenant(p.tenantId, (tx) =>
      this.repo.list(tx, { limit: q.limit + 1, after, dagId: q.dagId }),
    );
    const items = rows.slice(0, q.limit);
    const last = items.at(-1);
    return {
      items: items.map(toDto),
      nextPageToken:
        rows.length > q.limit && last
          ? encodePageToken({ createdAt: last.createdAt.toISOString(), id: last.id })
          : null,
    };
  }

  async get(p: TenantPrincipalT, id: string): Promise<ScheduleDto> {
    const row = await this.db.withTenant(p.tenantId, (tx) => this.repo.find(tx, id));
    if (!row) throw notFound('schedule', 'SCHEDULE_NOT_FOUND');
    return toDto(row);
  }

  async update(p: TenantPrincipalT, id: string, body: UpdateScheduleBody): Promise<ScheduleDto> {
    const now = this.clock.now();
    const row = await this.db.withTenant(p.tenantId, async (tx) => {
      const current = await this.repo.find(tx, id, { forUpdate: true });
      if (!current) throw notFound('schedule', 'SCHEDULE_NOT_FOUND');
      const cron = body.cron ?? current.cron;
      const timezone = body.timezone ?? current.timezone;
      validateCron(cron, timezone, now);
      const dagId = body.dagId ?? current.dagId;
      const version = body.version === undefined ? current.dagVersion : body.version;
      if (body.dagId !== undefined || body.version !== undefined || body.inputs !== undefined) {
        await this.assertDag(tx, dagId, version ?? undefined, body.inputs ?? current.inputs);
      }
      const changes: ScheduleChanges = {
        dagId: body.dagId,
        dagVersion: body.version,
        cron: body.cron,
        timezone: body.timezone,
        inputs: body.inputs,
        catchUp: body.catchUp,
        overlap: body.overlap,
        paused: body.paused,
      };
      // A new expression or zone starts afresh from now: fires of the old one are not caught up.
      if (cron !== current.cron || timezone !== current.timezone)
        changes.nextFireAt = firstFireAfter(cron, timezone, now);
      return this.repo.update(tx, id, changes);
    });
    if (!row) throw notFound('schedule', 'SCHEDULE_NOT_FOUND');
    return toDto(row);
  }

  /**
   * Pausing stops fires. Resuming applies the catch-up policy to the fire times that came due while
   * paused: none skips them all, latest keeps the newest one, all keeps them (bounded by the loop).
   */
  async setPaused(p: TenantPrincipalT, id: string, paused: boolean): Promise<ScheduleDto> {
    const now = this.clock.now();
    const row = await this.db.withTenant(p.tenantId, async (tx) => {
      const current = await this.repo.find(tx, id, { forUpdate: true });
      if (!current) return undefined;
      return this.repo.update(tx, id, { paused, ...(!paused && current.paused && resumeFrom(current, now)) });
    });
    if (!row) throw notFound('schedule', 'SCHEDULE_NOT_FOUND');
    return toDto(row);
  }

  async delete(p: TenantPrincipalT, id: string): Promise<void> {
    const deleted = await this.db.withTenant(p.tenantId, (tx) => this.repo.delete(tx, id));
    if (!deleted) throw notFound('schedule', 'SCHEDULE_NOT_FOUND');
  }

  /** The next `count` fire times of a stored schedule, from now. */
  async next(p: TenantPrincipalT, id: string, count: number) {
    const row = await this.db.withTenant(p.tenantId, (tx) => this.repo.find(tx, id));
    if (!row) throw notFound('schedule', 'SCHEDULE_NOT_FOUND');
    return this.preview(row.cron, row.timezone, count);
  }

  preview(cron: string, timezone: string, count: number) {
    const now = this.clock.now();
    validateCron(cron, timezone, now);
    const items = previewFireTimes(cron, timezone, now, count).map((f) => ({
      utc: f.utc.toISOString(),
      local: f.local,
    }));
    return { cron, timezone, items };
  }

  async fires(p: TenantPrincipalT, id: string, limit: number) {
    const items = await this.db.withTenant(p.tenantId, async (tx) => {
      if (!(await this.repo.find(tx, id))) throw notFound('schedule', 'SCHEDULE_NOT_FOUND');
      return this.repo.fires(tx, id, limit);
    });
    return {
      items: items.map((f) => ({
        fireTime: f.fireTime.toISOString(),
        runId: f.runId,
        outcome: f.outcome,
        error: f.error,
        firedAt: f.firedAt.toISOString(),
      })),
    };
  }

  /**
   * The DAG (and pinned version) must exist in this tenant and be active, and the inputs must match
   * its input schema; another tenant's DAG is unknown here.
   */
  private async assertDag(
    tx: TenantTx,
    dagId: string,
    version: number | undefined,
    inputs: Record<string, unknown>,
  ): Promise<void> {
    const v = await this.dags.findVersion(tx, dagId, version);
    if (!v) {
      throw new DomainError(
        'DAG_NOT_FOUND',
        version === undefined ? `DAG ${dagId} has no active version` : `DAG ${dagId} version ${version} not found`,
        404,
      );
    }
    if (v.status !== 'active') throw conflict('DAG_VERSION_DISABLED', `DAG ${dagId} version ${v.version} is disabled`);
    const r = compileInputSchema(v.definition.inputs).safeParse(inputs);
    if (!r.success) {
      const i = r.error.issues[0];
      const where = i.path.length > 0 ? i.path.map(String).join('.') : '(root)';
      throw badRequest('INVALID_INPUTS', `inputs ${where}: ${i.message}`, { path: i.path.map(String) });
    }
  }
}

/** The next fire time to handle when a paused schedule resumes at `now`, per its catch-up policy. */
function resumeFrom(s: ScheduleRecord, now: Date): { nextFireAt?: Date | null } {
  if (s.nextFireAt === null || s.nextFireAt > now) return {};
  switch (s.catchUp) {
    case 'none':
      return { nextFireAt: firstFireAfter(s.cron, s.timezone, now) };
    case 'latest':
      return { nextFireAt: lastFireTimeBetween(s.cron, s.timezone, s.nextFireAt, now) ?? s.nextFireAt };
    case 'all':
      return {};
  }
}

function firstFireAfter(cron: string, timezone: string, now: Date): Date | null {
  return nextFireTimes(cron, timezone, now, 1)[0] ?? null;
}

export function toDto(r: ScheduleRecord): ScheduleDto {
  return {
    id: r.id,
    dagId: r.dagId,
    version: r.dagVersion,
    cron: r.cron,
    timezone: r.timezone,
    inputs: r.inputs,
    catchUp: r.catchUp,
    overlap: r.overlap,
    paused: r.paused,
    nextFireAt: r.nextFireAt?.toISOString() ?? null,
    queuedFireAt: r.queuedFireAt?.toISOString() ?? null,
    lastFireAt: r.lastFireAt?.toISOString() ?? null,
    lastRunId: r.lastRunId,
    createdBy: r.createdBy,
    createdAt: r.createdAt.toISOString(),
    updatedAt: r.updatedAt.toISOString(),
  };
}
