import { Injectable } from '@nestjs/common';
import { sql } from 'kysely';
import type { SystemDb } from '../../core/database/handles';

export interface TenantQueueRow {
  tenant_id: string;
  ready: number;
  waiting: number;
  in_flight: number;
  oldest_ready_seconds: number | null;
  in_flight_cap: number;
  shared_in_flight_cap: number | null;
  plan_id: string | null;
  limits: Record<string, number | null> | null;
  claims: number;
  /** Hits per limit, most first. */
  hits: { limit: string; hits: number }[] | null;
  at: Date;
  hits_since: Date;
}

/** The operator's view of the tenants' queues: cross-tenant reads, system handle. */
@Injectable()
export class AdminRepository {
  /**
   * A page of tenants (by id) with their queue figures, in one statement. Per tenant it reads its
   * ready and leased items through the queue's per-tenant partial indexes, its first ready item in
   * queue order, the steps of its open runs (through the index of open runs) that wait outside the
   * queue, its in-flight caps (ordo_in_flight_cap, alone and while tenants share) and its plan
   * (ordo_tenant_limits); once, the attempts begun in the window (one range of the attempts'
   * creation-time index, so its cost follows the instance's claims in the window, not the attempts
   * kept) and the page's limit hits of the previous and current minute.
   */
  async queues(
    db: SystemDb,
    q: {
      tenantId?: string;
      afterId?: string;
      limit: number;
      claimsWindowSeconds: number;
      /** The instance's caps (ORDO_TENANT_MAX_IN_FLIGHT, ORDO_TENANT_SHARED_IN_FLIGHT; 0: none). */
      cap: number;
      sharedCap: number;
    },
  ): Promise<TenantQueueRow[]> {
    const { rows } = await sql<TenantQueueRow>`
      with t as (
        select tn.id from tenant tn
        where (${q.tenantId ?? null}::text is null or tn.id = ${q.tenantId ?? null})
          and (${q.afterId ?? null}::text is null or tn.id > ${q.afterId ?? null})
        order by tn.id
        limit ${q.limit}
      ),
      clock as (select now() as at, date_trunc('minute', now()) - interval '1 minute' as hits_since),
      -- The window's attempts of every tenant, read through the creation-time index alone: a lookup
      -- per tenant by its key would read all of the tenant's attempts, not the window's.
      claims as materialized (
        select a.tenant_id, count(*) as n from attempt a
        where a.created_at >= now() - make_interval(secs => ${q.claimsWindowSeconds})
        group by a.tenant_id
      ),
      hits as (
        select h.tenant_id,
          jsonb_agg(jsonb_build_object('limit', h.limit_name, 'hits', h.hits) order by h.hits desc, h.limit_name) as hits
        from (
          select lh.tenant_id, lh.limit_name, sum(lh.hits) as hits from limit_hit lh
          where lh.tenant_id in (select id from t) and lh.minute >= (select hits_since from clock)
          group by lh.tenant_id, lh.limit_name
        ) h
        group by h.tenant_id
      )
      select t.id as tenant_id,
        (select count(*) from queue_item qi where qi.tenant_id = t.id and qi.state = 'ready') as ready,
        (select count(*) from queue_item qi where qi.tenant_id = t.id and qi.state = 'leased') as in_flight,
        (select count(*) from run r join step s on s.tenant_id = r.tenant_id and s.run_id = r.run_id
          where r.tenant_id = t.id and r.status in ('queued', 'running') and s.status in ('waiting', 'retrying'))
          as waiting,
        (select extract(epoch from clock.at - qi.enqueued_at)::float8 from queue_item qi
          where qi.tenant_id = t.id and qi.state = 'ready' order by qi.id limit 1) as oldest_ready_seconds,
        ordo_in_flight_cap(tq.max_in_flight, tq.weight, jsonb_build_object('cap', ${q.cap}::integer)) as in_flight_cap,
        case when ${q.sharedCap}::integer > 0 then ordo_in_flight_cap(tq.max_in_flight, tq.weight,
          jsonb_build_object('cap', ${q.cap}::integer, 'sharedCap', ${q.sharedCap}::integer)) end as shared_in_flight_cap,
        l.plan_id, l.limits, coalesce(c.n, 0) as claims, h.hits, clock.at, clock.hits_since
      from t
      cross join clock
      left join tenant_queue tq on tq.tenant_id = t.id
      left join lateral ordo_tenant_limits(t.id) l on true
      left join claims c on c.tenant_id = t.id
      left join hits h on h.tenant_id = t.id
      order by t.id
    `.execute(db);
    return rows;
  }

  async tenantExists(db: SystemDb, tenantId: string): Promise<boolean> {
    const row = await db.selectFrom('tenant').select('id').where('id', '=', tenantId).executeTakeFirst();
    return row !== undefined;
  }
}
