import { Injectable } from '@nestjs/common';
import { sql } from 'kysely';
import { tenantOf, type SystemTx, type TenantTx } from '../../core/database/handles';
import type { EffectiveLimits, LimitOverrides, PlanLimits } from './plan-limits';

export interface PlanRow {
  id: string;
  description: string;
  limits: PlanLimits;
  tenants: number;
  created_at: Date;
  updated_at: Date;
}

export interface TenantPlanRow {
  tenant_id: string;
  plan_id: string;
  time_zone: string;
  overrides: LimitOverrides;
  /** The plan's limits with the overrides applied (ordo_tenant_limits). */
  limits: EffectiveLimits;
  updated_at: Date;
}

export interface UsageRow {
  plan_id: string | null;
  limits: EffectiveLimits | null;
  time_zone: string;
  period_start: Date;
  resets_at: Date;
  runs: number;
  open_runs: number;
  queued_steps: number;
  steps_in_flight: number;
  artifact_bytes: number;
}

/** What a tenant's quota period is: the calendar month of its plan's time zone (UTC without a plan). */
const PERIOD = sql`date_trunc('month', now() at time zone z.tz)::date`;

/**
 * Plans, tenants' assignments and overrides, and run counts per period. Changes take the system
 * handle (platform operators act across tenants); a tenant reads its own usage in its own transaction.
 */
@Injectable()
export class PlansRepository {
  async listPlans(tx: SystemTx): Promise<PlanRow[]> {
    const r = await sql<PlanRow>`
      select p.id, p.description, p.limits, p.created_at, p.updated_at,
        (select count(*) from tenant_plan tp where tp.plan_id = p.id)::integer as tenants
      from plan p order by p.id`.execute(tx);
    return r.rows;
  }

  /**
   * A plan; with `lock`, its row is locked: `update` against changes and deletion, `share` against
   * deletion only (an assignment to it).
   */
  async findPlan(tx: SystemTx, id: string, lock?: 'update' | 'share'): Promise<PlanRow | undefined> {
    const r = await sql<PlanRow>`
      select p.id, p.description, p.limits, p.created_at, p.updated_at,
        (select count(*) from tenant_plan tp where tp.plan_id = p.id)::integer as tenants
      from plan p where p.id = ${id}
      ${lock === 'update' ? sql`for update of p` : lock === 'share' ? sql`for key share of p` : sql``}`.execute(tx);
    return r.rows[0];
  }

  /** Inserts a plan; false when the id is taken. */
  async insertPlan(tx: SystemTx, p: { id: string; description: string; limits: PlanLimits }): Promise<boolean> {
    const r = await sql`
      insert into plan (id, description, limits) values (${p.id}, ${p.description}, ${JSON.stringify(p.limits)}::jsonb)
      on conflict (id) do nothing`.execute(tx);
    return Number(r.numAffectedRows ?? 0) > 0;
  }

  async updatePlan(tx: SystemTx, id: string, p: { description: string; limits: PlanLimits }): Promise<void> {
    await sql`
      update plan set description = ${p.description}, limits = ${JSON.stringify(p.limits)}::jsonb,
        updated_at = date_trunc('milliseconds', now())
      where id = ${id}`.execute(tx);
  }

  async deletePlan(tx: SystemTx, id: string): Promise<void> {
    await sql`delete from plan where id = ${id}`.execute(tx);
  }

  async tenantsOnPlan(tx: SystemTx, planId: string): Promise<string[]> {
    const r = await sql<{ tenant_id: string }>`
      select tenant_id from tenant_plan where plan_id = ${planId} order by tenant_id`.execute(tx);
    return r.rows.map((x) => x.tenant_id);
  }

  async tenantExists(tx: SystemTx, tenantId: string): Promise<boolean> {
    const r = await sql`select 1 from tenant where id = ${tenantId}`.execute(tx);
    return r.rows.length > 0;
  }

  /** A tenant's assignment with its effective limits; with `lock`, its row locked against other changes. */
  async findTenantPlan(tx: SystemTx, tenantId: string, lock = false): Promise<TenantPlanRow | undefined> {
    const r = await sql<TenantPlanRow>`
      select tp.tenant_id, tp.plan_id, tp.time_zone, tp.overrides, tp.updated_at,
        jsonb_strip_nulls(p.limits || tp.overrides) as limits
      from tenant_plan tp join plan p on p.id = tp.plan_id
      where tp.tenant_id = ${tenantId}
      ${lock ? sql`for update of tp` : sql``}`.execute(tx);
    return r.rows[0];
  }

  /** Assigns a plan (and a time zone: the one it had, or UTC, when none is given); overrides stay. */
  async assignPlan(tx: SystemTx, tenantId: string, planId: string, timeZone: string | undefined): Promise<void> {
    await sql`
      insert into tenant_plan (tenant_id, plan_id, time_zone) values (${tenantId}, ${planId}, ${timeZone ?? 'UTC'})
      on conflict (tenant_id) do update set plan_id = excluded.plan_id,
        time_zone = ${timeZone === undefined ? sql`tenant_plan.time_zone` : sql`excluded.time_zone`},
        updated_at = date_trunc('milliseconds', now())`.execute(tx);
  }

  async setOverrides(tx: SystemTx, tenantId: string, overrides: LimitOverrides): Promise<void> {
    await sql`
      update tenant_plan set overrides = ${JSON.stringify(overrides)}::jsonb, updated_at = date_trunc('milliseconds', now())
      where tenant_id = ${tenantId}`.execute(tx);
  }

  /** Whether PostgreSQL knows the time zone (the quota period is computed there). */
  async knowsTimeZone(tx: SystemTx, name: string): Promise<boolean> {
    const r = await sql<{ ok: boolean }>`
      select exists (select 1 from pg_timezone_names where lower(name) = lower(${name})) as ok`.execute(tx);
    return r.rows[0].ok;
  }

  /** Copies the tenants' engine share of their limits into their queue rows (ordo_plan_sync). */
  async planSync(tx: SystemTx, tenantIds: string[]): Promise<void> {
    if (tenantIds.length === 0) return;
    await sql`select ordo_plan_sync(${tenantIds}::text[])`.execute(tx);
  }

  /**
   * Starts the count of the tenant's current period where it has none: the top-level runs it
   * created since the period began (runs created before it had a plan were not counted).
   */
  async seedPeriod(tx: SystemTx, tenantId: string): Promise<void> {
    await sql`
      with z as (select time_zone as tz from tenant_plan where tenant_id = ${tenantId}),
      p as (select ${PERIOD} as start, z.tz from z)
      insert into tenant_usage (tenant_id, period_start, runs_created)
      select ${tenantId}, p.start, (
        select count(*) from run r
        where r.tenant_id = ${tenantId} and r.parent_run_id is null and r.created_at >= (p.start::timestamp at time zone p.tz)
      )
      from p
      on conflict (tenant_id, period_start) do nothing`.execute(tx);
  }

  /** Sets the count of the tenant's current period to zero; returns what it was. */
  async resetPeriod(tx: SystemTx, tenantId: string): Promise<number> {
    const r = await sql<{ before: number }>`
      with z as (select coalesce((select time_zone from tenant_plan where tenant_id = ${tenantId}), 'UTC') as tz),
      p as (select ${PERIOD} as start from z),
      old as (
        select tu.runs_created from tenant_usage tu, p
        where tu.tenant_id = ${tenantId} and tu.period_start = p.start for update of tu
      ),
      w as (
        insert into tenant_usage (tenant_id, period_start, runs_created) select ${tenantId}, p.start, 0 from p
        on conflict (tenant_id, period_start) do update set runs_created = 0
      )
      select coalesce((select runs_created from old), 0)::bigint as before`.execute(tx);
    return Number(r.rows[0].before);
  }

  /**
   * A tenant's plan, limits, current use and quota period, read in one statement. The period's run
   * count is the plan's counter (kept for tenants with a plan); a tenant without a plan has its
   * top-level runs of the (UTC) month counted from its runs.
   */
  async usage(tx: TenantTx): Promise<UsageRow> {
    return (await usageQuery(tenantOf(tx)).execute(tx)).rows[0];
  }

  /** usage, for a platform operator. */
  async systemUsage(tx: SystemTx, tenantId: string): Promise<UsageRow> {
    return (await usageQuery(tenantId).execute(tx)).rows[0];
  }

  /** Bytes of artifacts a tenant stores (system work: the artifact quota's check). */
  async artifactBytes(tx: SystemTx, tenantId: string): Promise<number> {
    const r = await sql<{ n: string }>`
      select coalesce(sum(size), 0)::bigint as n from artifact where tenant_id = ${tenantId}`.execute(tx);
    return Number(r.rows[0].n);
  }
}

function usageQuery(tenantId: string) {
  return sql<UsageRow>`
      with l as (select plan_id, limits, time_zone from ordo_tenant_limits(${tenantId})),
      z as (select coalesce((select time_zone from l), 'UTC') as tz),
      p as (select ${PERIOD} as start, z.tz from z)
      select
        (select plan_id from l) as plan_id,
        (select jsonb_strip_nulls(limits) from l) as limits,
        p.tz as time_zone,
        p.start::timestamp at time zone p.tz as period_start,
        (p.start + interval '1 month')::timestamp at time zone p.tz as resets_at,
        case when exists (select 1 from l) then
          coalesce((select tu.runs_created from tenant_usage tu where tu.tenant_id = ${tenantId} and tu.period_start = p.start), 0)
        else (
          select count(*) from run r
          where r.tenant_id = ${tenantId} and r.parent_run_id is null and r.created_at >= (p.start::timestamp at time zone p.tz)
        ) end as runs,
        (select count(*) from run r
          where r.tenant_id = ${tenantId} and r.status in ('scheduled', 'queued', 'running') and r.parent_run_id is null
        ) as open_runs,
        (select count(*) from queue_item q where q.tenant_id = ${tenantId} and q.state = 'ready') as queued_steps,
        (select count(*) from queue_item q where q.tenant_id = ${tenantId} and q.state = 'leased') as steps_in_flight,
        (select coalesce(sum(a.size), 0) from artifact a where a.tenant_id = ${tenantId}) as artifact_bytes
      from p`;
}
