import { Injectable } from '@nestjs/common';
import { Database } from '../../core/database/database';
import type { SystemTx } from '../../core/database/handles';
import { badRequest, conflict, DomainError, notFound } from '../../core/errors/domain-error';
import type { PlatformPrincipalT } from '../../core/http/request-context';
import { OperatorAuditRepository, type OperatorAuditInput } from './operator-audit.repository';
import type {
  AssignPlanBody,
  CreatePlanBody,
  PlanDto,
  ResetUsageBody,
  SetOverridesBody,
  TenantPlanDto,
  UpdatePlanBody,
  UsageDto,
} from './plans.dto';
import { canonicalTimeZone } from './plans.dto';
import { PlansRepository, type PlanRow, type TenantPlanRow, type UsageRow } from './plans.repository';
import { TenantLimits } from './tenant-limits';

const planNotFound = (id: string) => new DomainError('PLAN_NOT_FOUND', `plan ${id} not found`, 404);
// (The code of an unknown tenant on every platform route, as on the tenants routes.)
const tenantNotFound = (id: string) => notFound(`tenant ${id}`);

/**
 * Plans and their assignment to tenants, by platform operators; usage, for a tenant and for
 * operators. Every change is one system transaction that also copies the engine's share of the
 * limits into the affected tenants' queue rows (ordo_plan_sync) and appends the operator audit log;
 * each process's cache of the affected tenants' limits is dropped once it commits (other processes
 * read them again within TENANT_LIMITS_TTL_MS).
 */
@Injectable()
export class PlansService {
  constructor(
    private readonly db: Database,
    private readonly repo: PlansRepository,
    private readonly audit: OperatorAuditRepository,
    private readonly limits: TenantLimits,
  ) {}

  async list(): Promise<{ items: PlanDto[] }> {
    const rows = await this.db.withSystem((tx) => this.repo.listPlans(tx));
    return { items: rows.map(planDto) };
  }

  async get(planId: string): Promise<PlanDto> {
    const row = await this.db.withSystem((tx) => this.repo.findPlan(tx, planId));
    if (!row) throw planNotFound(planId);
    return planDto(row);
  }

  async create(op: PlatformPrincipalT, body: CreatePlanBody): Promise<PlanDto> {
    return this.change(op, async (tx) => {
      const plan = { id: body.id, description: body.description ?? '', limits: body.limits };
      if (!(await this.repo.insertPlan(tx, plan))) throw conflict('PLAN_EXISTS', `plan ${body.id} exists already`);
      const row = (await this.repo.findPlan(tx, body.id))!;
      return {
        result: planDto(row),
        audit: { action: 'plan.create', planId: body.id, detail: { before: null, after: planState(row) } },
        tenants: [],
      };
    });
  }

  /** Replaces a plan's description and limits; every tenant on it gets them from this commit on. */
  async update(op: PlatformPrincipalT, planId: string, body: UpdatePlanBody): Promise<PlanDto> {
    return this.change(op, async (tx) => {
      const before = await this.repo.findPlan(tx, planId, 'update');
      if (!before) throw planNotFound(planId);
      await this.repo.updatePlan(tx, planId, {
        description: body.description ?? before.description,
        limits: body.limits,
      });
      const tenants = await this.repo.tenantsOnPlan(tx, planId);
      await this.repo.planSync(tx, tenants);
      const after = (await this.repo.findPlan(tx, planId))!;
      return {
        result: planDto(after),
        audit: {
          action: 'plan.update',
          planId,
          reason: body.reason,
          detail: { before: planState(before), after: planState(after), tenants: tenants.length },
        },
        tenants,
      };
    });
  }

  /** Deletes a plan no tenant is on (PLAN_IN_USE otherwise). */
  async remove(op: PlatformPrincipalT, planId: string): Promise<void> {
    await this.change(op, async (tx) => {
      const before = await this.repo.findPlan(tx, planId, 'update');
      if (!before) throw planNotFound(planId);
      if (before.tenants > 0)
        throw conflict(
          'PLAN_IN_USE',
          `plan ${planId} is the plan of ${before.tenants} tenant(s): assign them another first`,
        );
      await this.repo.deletePlan(tx, planId);
      return {
        result: undefined,
        audit: { action: 'plan.delete', planId, detail: { before: planState(before), after: null } },
        tenants: [],
      };
    });
  }

  /** Puts a tenant on a plan (its overrides stay); the time zone stays what it was unless given. */
  async assign(op: PlatformPrincipalT, tenantId: string, body: AssignPlanBody): Promise<TenantPlanDto> {
    const timeZone = body.timeZone === undefined ? undefined : canonicalTimeZone(body.timeZone);
    return this.change(op, async (tx) => {
      if (!(await this.repo.tenantExists(tx, tenantId))) throw tenantNotFound(tenantId);
      if (timeZone !== undefined && !(await this.repo.knowsTimeZone(tx, timeZone)))
        throw badRequest('INVALID_TIME_ZONE', `time zone ${body.timeZone} is not known to the database`);
      if (!(await this.repo.findPlan(tx, body.planId, 'share'))) throw planNotFound(body.planId);
      const before = await this.repo.findTenantPlan(tx, tenantId, true);
      await this.repo.assignPlan(tx, tenantId, body.planId, timeZone);
      await this.repo.seedPeriod(tx, tenantId);
      await this.repo.planSync(tx, [tenantId]);
      const after = (await this.repo.findTenantPlan(tx, tenantId))!;
      return {
        result: tenantPlanDto(after),
        audit: {
          action: 'tenant.plan.assign',
          tenantId,
          planId: body.planId,
          reason: body.reason,
          detail: { before: before ? tenantPlanState(before) : null, after: tenantPlanState(after) },
        },
        tenants: [tenantId],
      };
    });
  }

  /** Replaces a tenant's overrides of its plan's limits. */
  async setOverrides(op: PlatformPrincipalT, tenantId: string, body: SetOverridesBody): Promise<TenantPlanDto> {
    return this.change(op, async (tx) => {
      if (!(await this.repo.tenantExists(tx, tenantId))) throw tenantNotFound(tenantId);
      const before = await this.repo.findTenantPlan(tx, tenantId, true);
      if (!before)
        throw conflict('TENANT_HAS_NO_PLAN', `tenant ${tenantId} has no plan: assign one before overriding its limits`);
      await this.repo.setOverrides(tx, tenantId, body.overrides);
      await this.repo.planSync(tx, [tenantId]);
      const after = (await this.repo.findTenantPlan(tx, tenantId))!;
      return {
        result: tenantPlanDto(after),
        audit: {
          action: 'tenant.overrides.set',
          tenantId,
          planId: after.plan_id,
          reason: body.reason,
          detail: { before: tenantPlanState(before), after: tenantPlanState(after) },
        },
        tenants: [tenantId],
      };
    });
  }

  /** Sets the run count of the tenant's current quota period to zero; answers its usage after. */
  async resetUsage(op: PlatformPrincipalT, tenantId: string, body: ResetUsageBody): Promise<UsageDto> {
    return this.change(op, async (tx) => {
      if (!(await this.repo.tenantExists(tx, tenantId))) throw tenantNotFound(tenantId);
      const before = await this.repo.resetPeriod(tx, tenantId);
      await this.repo.planSync(tx, [tenantId]);
      const usage = await this.repo.systemUsage(tx, tenantId);
      return {
        result: usageDto(usage),
        audit: {
          action: 'tenant.usage.reset',
          tenantId,
          planId: usage.plan_id,
          reason: body.reason,
          detail: {
            period: usage.period_start.toISOString(),
            before: { runsThisPeriod: before },
            after: { runsThisPeriod: 0 },
          },
        },
        tenants: [tenantId],
      };
    });
  }

  /** A tenant's usage, for a platform operator. */
  async tenantUsage(tenantId: string): Promise<UsageDto> {
    const row = await this.db.withSystem(async (tx) => {
      if (!(await this.repo.tenantExists(tx, tenantId))) throw tenantNotFound(tenantId);
      return this.repo.systemUsage(tx, tenantId);
    });
    return usageDto(row);
  }

  /** The calling tenant's own usage. */
  async ownUsage(tenantId: string): Promise<UsageDto> {
    return usageDto(await this.db.withTenant(tenantId, (tx) => this.repo.usage(tx)));
  }

  /**
   * Runs an operator's change in one system transaction with its audit entry (actor: the operator
   * token's subject and id); the affected tenants' cached limits are dropped after the commit.
   */
  private async change<T>(
    op: PlatformPrincipalT,
    fn: (
      tx: SystemTx,
    ) => Promise<{ result: T; audit: Omit<OperatorAuditInput, 'actor' | 'tokenJti'>; tenants: string[] }>,
  ): Promise<T> {
    const done = await this.db.withSystem(async (tx) => {
      const out = await fn(tx);
      await this.audit.append(tx, { ...out.audit, actor: op.subject, tokenJti: op.jti });
      return out;
    });
    for (const t of done.tenants) this.limits.forget(t);
    return done.result;
  }
}

const iso = (d: Date) => new Date(d).toISOString();

function planDto(r: PlanRow): PlanDto {
  return {
    id: r.id,
    description: r.description,
    limits: r.limits,
    tenants: r.tenants,
    createdAt: iso(r.created_at),
    updatedAt: iso(r.updated_at),
  };
}

function planState(r: PlanRow) {
  return { description: r.description, limits: r.limits };
}

function tenantPlanDto(r: TenantPlanRow): TenantPlanDto {
  return {
    tenantId: r.tenant_id,
    planId: r.plan_id,
    timeZone: r.time_zone,
    overrides: r.overrides,
    limits: r.limits as TenantPlanDto['limits'],
    updatedAt: iso(r.updated_at),
  };
}

function tenantPlanState(r: TenantPlanRow) {
  return { planId: r.plan_id, timeZone: r.time_zone, overrides: r.overrides };
}

function usageDto(r: UsageRow): UsageDto {
  return {
    plan: r.plan_id,
    limits: (r.limits ?? {}) as UsageDto['limits'],
    usage: {
      runsThisPeriod: Number(r.runs),
      concurrentRuns: Number(r.open_runs),
      queuedSteps: Number(r.queued_steps),
      stepsInFlight: Number(r.steps_in_flight),
      artifactBytes: Number(r.artifact_bytes),
    },
    period: { start: iso(r.period_start), resetsAt: iso(r.resets_at), timeZone: r.time_zone },
  };
}
