import { Injectable } from '@nestjs/common';
import { Database } from '../../core/database/database';
import { conflict, forbidden, notFound } from '../../core/errors/domain-error';
import { APPROVAL_DECISIONS } from '../dags/dag-definition';
import type { JsonObject } from '../plugins/plugin';
import { RunsRepository } from '../runs/runs.repository';
import { EngineRepository } from './engine.repository';
import { completionFor, EngineStore, type Completion } from './engine.store';
import type { JobPayload } from './jobs';

export type Decision = (typeof APPROVAL_DECISIONS)[number];

/** What the approval plugin's config may say about who decides and what a timeout does. */
interface ApprovalConfig {
  subjects?: string[];
  defaultDecision?: Decision;
}

/**
 * Decisions on approval steps: a person's (through the API), or the default one when the wait
 * times out. The step succeeds with the decision as its named status and outputs
 * `{decision, comment, decidedBy}`, after a `step.decided` event that records who, when and why.
 */
@Injectable()
export class ApprovalsService {
  constructor(
    private readonly db: Database,
    private readonly runs: RunsRepository,
    private readonly engine: EngineRepository,
    private readonly store: EngineStore,
  ) {}

  /** A decision by `subject` on a waiting approval step of the tenant's run. */
  async decide(
    tenantId: string,
    runId: string,
    stepId: string,
    subject: string,
    decision: Decision,
    comment: string | null,
  ): Promise<{ runId: string; stepId: string; decision: Decision; decidedBy: string }> {
    const step = await this.db.withTenant(tenantId, async (tx) => {
      if (!(await this.runs.findRun(tx, runId))) throw notFound(`run ${runId}`, 'RUN_NOT_FOUND');
      return (await this.runs.listSteps(tx, runId)).find((s) => s.step_id === stepId);
    });
    if (!step) throw notFound(`step ${stepId} of run ${runId}`, 'STEP_NOT_FOUND');
    if (step.plugin !== 'approval') throw conflict('STEP_NOT_APPROVAL', `step ${stepId} is not an approval step`);
    // (The run is the tenant's, read above under its row-level security.)
    const [state] = await this.db.withSystem((tx) => this.engine.stepStates(tx, [{ tenantId, runId, stepId }]));
    if (step.status !== 'waiting')
      throw conflict('STEP_NOT_WAITING', `step ${stepId} is ${step.status}, not waiting for a decision`);
    const config = (state?.config ?? {}) as ApprovalConfig;
    if (config.subjects && !config.subjects.includes(subject))
      throw forbidden(`${subject} may not decide step ${stepId}`, 'DECISION_FORBIDDEN');
    const key = { tenantId, runId, stepId, attempt: step.attempts, epoch: step.epoch };
    const applied = await this.apply(key, subject, decision, comment);
    if (!applied) throw conflict('STEP_NOT_WAITING', `step ${stepId} is no longer waiting for a decision`);
    return { runId, stepId, decision, decidedBy: subject };
  }

  /** The wait of a step timed out: its default decision applies, or it fails (APPROVAL_TIMEOUT). */
  async timeout(p: JobPayload<'ordo.engine.step_timeout'>): Promise<void> {
    const [st] = await this.db.withSystem((tx) => this.engine.stepStates(tx, [p]));
    if (!st || st.status !== 'waiting' || st.epoch !== p.epoch) return;
    const key = { ...p, attempt: st.attempts };
    const def = ((st.config ?? {}) as ApprovalConfig).defaultDecision;
    if (def) {
      await this.apply(key, 'engine', def, 'no decision before the timeout: the default applies');
      return;
    }
    const failed: Completion = completionFor(key, 'engine', {
      status: 'failed',
      error: { code: 'APPROVAL_TIMEOUT', message: 'no decision before the timeout', retryable: false },
      logs: [],
    });
    await this.store.resolve(failed, { type: 'step.timed_out', data: { epoch: p.epoch } });
  }

  private apply(
    key: { tenantId: string; runId: string; stepId: string; attempt: number; epoch: number },
    decidedBy: string,
    decision: Decision,
    comment: string | null,
  ): Promise<boolean> {
    const outputs: JsonObject = { decision, comment, decidedBy };
    const now = new Date();
    const result = completionFor(
      key,
      decidedBy,
      { status: 'succeeded', outputs, namedStatus: decision, logs: [] },
      now,
      now,
    );
    return this.store.resolve(result, { type: 'step.decided', data: outputs });
  }
}
