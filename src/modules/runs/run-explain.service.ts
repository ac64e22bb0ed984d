import { Inject, Injectable } from '@nestjs/common';
import type { OrdoConfig } from '../../core/config/config';
import { ORDO_CONFIG } from '../../core/config/config.module';
import { Database } from '../../core/database/database';
import type { TenantTx } from '../../core/database/handles';
import { notFound } from '../../core/errors/domain-error';
import type { RunExplanation, StepExplanation } from './run-explain.dto';
import { RunExplainRepository, type StepExplainRow } from './run-explain.repository';
import { RunsRepository } from './runs.repository';
import { TERMINAL_RUN_STATES, type RunStatus } from './state-machine';

export interface RunWaiting {
  reason: StepExplanation['reason'];
  stepId: string;
}

/**
 * "Why is it waiting?": each unfinished step's reason, computed in the database from the state
 * the engine acts on (ordo_run_explain), under the caps a claim would apply now. The run's record
 * shows the headline of the same computation.
 */
@Injectable()
export class RunExplainService {
  private readonly cap: number;
  private readonly sharedCap: number | null;

  constructor(
    private readonly db: Database,
    private readonly runs: RunsRepository,
    private readonly repo: RunExplainRepository,
    @Inject(ORDO_CONFIG) private readonly config: OrdoConfig,
  ) {
    // As a worker's claim policy passes them (src/modules/engine/claim-policy.ts); a tenant's plan
    // and weight apply in the database (ordo_in_flight_cap).
    this.cap = config.ORDO_TENANT_MAX_IN_FLIGHT;
    this.sharedCap = config.ORDO_TENANT_SHARED_IN_FLIGHT > 0 ? config.ORDO_TENANT_SHARED_IN_FLIGHT : null;
  }

  async explain(tenantId: string, runId: string): Promise<RunExplanation> {
    return this.db.withTenant(tenantId, async (tx) => {
      // The steps are read before the run: each statement sees what had committed when it began,
      // and a claim that commits between them starts the run and its step together, so a step
      // seen running is never shown in a run still queued (the run read after is as new or newer).
      const steps = await this.rows(tx, tenantId, runId);
      const run = await this.runs.findRun(tx, runId);
      if (!run) throw notFound('run', 'RUN_NOT_FOUND');
      const rows = TERMINAL_RUN_STATES.includes(run.status as RunStatus) ? [] : steps;
      return {
        runId,
        status: run.status as RunStatus,
        waiting: headlineOf(rows),
        steps: rows.map(
          (r) => ({ stepId: r.step_id, status: r.status, reason: r.reason, ...r.detail }) as StepExplanation,
        ),
      };
    });
  }

  /** What holds an unfinished run up (null: nothing but running steps and their dependents). */
  async waiting(tx: TenantTx, tenantId: string, runId: string): Promise<RunWaiting | null> {
    return headlineOf(await this.rows(tx, tenantId, runId));
  }

  private async rows(tx: TenantTx, tenantId: string, runId: string): Promise<StepExplainRow[]> {
    const alone = await this.repo.steps(tx, runId, this.cap, null);
    // The shared cap applies while other tenants have work, and only to queued steps: only for
    // those is it asked whether they do.
    if (this.sharedCap === null || !alone.some((r) => r.status === 'queued')) return alone;
    const shared = await this.db.withSystem((sys) =>
      this.repo.othersActive(sys, tenantId, this.config.ORDO_TENANT_SHARED_WINDOW_MS),
    );
    return shared ? this.repo.steps(tx, runId, this.cap, this.sharedCap) : alone;
  }
}

function headlineOf(rows: StepExplainRow[]): RunWaiting | null {
  const h = rows.find((r) => r.headline);
  return h ? { reason: h.reason as StepExplanation['reason'], stepId: h.step_id } : null;
}
