import { Injectable } from '@nestjs/common';
import { sql } from 'kysely';
import { tenantOf, type SystemTx, type TenantTx } from '../../core/database/handles';

/** One row of ordo_run_explain: an unfinished step, its reason and the reason's details. */
export interface StepExplainRow {
  step_id: string;
  status: string;
  reason: string;
  detail: Record<string, unknown>;
  headline: boolean;
}

@Injectable()
export class RunExplainRepository {
  /** Why each unfinished step of the run is not running (db/functions/ordo_run_explain.sql). */
  async steps(tx: TenantTx, runId: string, cap: number, sharedCap: number | null): Promise<StepExplainRow[]> {
    const r = await sql<StepExplainRow>`
      select step_id, status, reason, detail, headline
      from ordo_run_explain(${tenantOf(tx)}, ${runId}::uuid, ${cap}::integer, ${sharedCap}::integer)`.execute(tx);
    return r.rows;
  }

  /**
   * Whether other tenants share the engine with `tenantId`, as a worker counts them for the shared
   * cap (src/modules/engine/tenant-activity.ts): another tenant was served by a claim within the
   * window, or has work in the queue now. Cross-tenant by nature: it answers one boolean, no
   * tenant's data.
   */
  async othersActive(sys: SystemTx, tenantId: string, windowMs: number): Promise<boolean> {
    const r = await sql<{ active: boolean }>`
      select exists (
        select 1 from tenant_queue tq
        where tq.tenant_id <> ${tenantId}
          and (tq.served_at > now() - make_interval(secs => ${windowMs}::numeric / 1000)
            or exists (select 1 from queue_item q where q.tenant_id = tq.tenant_id))
      ) as active`.execute(sys);
    return r.rows[0]?.active ?? false;
  }
}
