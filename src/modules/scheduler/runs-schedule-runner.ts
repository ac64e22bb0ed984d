import { Injectable, Optional } from '@nestjs/common';
import { Database } from '../../core/database/database';
import { DomainError } from '../../core/errors/domain-error';
import { LimitHits } from '../plans/limit-hits';
import { RunsRepository } from '../runs/runs.repository';
import { RunsService } from '../runs/runs.service';
import { TERMINAL_RUN_STATES, type RunStatus } from '../runs/state-machine';
import { ScheduleRunner, type ScheduledRunRequest } from './schedule-runner';

/** Schedules create, inspect and cancel runs through the runs module, within the schedule's tenant. */
@Injectable()
export class RunsScheduleRunner extends ScheduleRunner {
  constructor(
    private readonly db: Database,
    private readonly runs: RunsService,
    private readonly runsRepo: RunsRepository,
    /** Counts fires refused by a plan's limit as limit hits, as a request's refusal is counted. */
    @Optional() private readonly limitHits?: LimitHits,
  ) {
    super();
  }

  async createRun(tenantId: string, req: ScheduledRunRequest): Promise<{ runId: string; created: boolean }> {
    try {
      const r = await this.runs.createRun(tenantId, req);
      return { runId: r.runId, created: r.created };
    } catch (e) {
      this.limitHits?.recordError(tenantId, e);
      throw e;
    }
  }

  /** A refused batch is not a hit: the loop then creates its fires one by one (createRun), each counted. */
  async createRuns(tenantId: string, reqs: ScheduledRunRequest[]): Promise<{ runId: string; created: boolean }[]> {
    const rs = await this.runs.createRuns(tenantId, reqs);
    return rs.map((r) => ({ runId: r.runId, created: r.created }));
  }

  async isActive(tenantId: string, runId: string): Promise<boolean> {
    const run = await this.db.withTenant(tenantId, (tx) => this.runsRepo.findRun(tx, runId));
    return run !== undefined && !TERMINAL_RUN_STATES.includes(run.status as RunStatus);
  }

  async cancel(tenantId: string, runId: string, reason: string): Promise<void> {
    try {
      await this.runs.cancel(tenantId, runId, reason);
    } catch (e) {
      // The run ended (or vanished) between the check and the cancel: nothing left to cancel.
      if (e instanceof DomainError && (e.code === 'RUN_FINISHED' || e.code === 'RUN_NOT_FOUND')) return;
      throw e;
    }
  }
}
