import { Injectable } from '@nestjs/common';
import { Database } from '../../core/database/database';
import { canonicalJson } from '../../core/json/canonical-json';
import { checkPreconditions, conditionScope } from '../flow/preconditions';
import type { StepSpec } from '../runs/run-plan';
import { EngineRepository } from './engine.repository';
import { completionFor, EngineStore, type RunDataTarget } from './engine.store';
import type { JobPayload } from './jobs';

/**
 * The checks of steps that wait for their preconditions (onViolation: wait), run by the job runner:
 * no worker slot or lease is held while a step waits. Each check is recorded as a
 * `step.precondition_checked` event; when the preconditions hold, the step is queued again and the
 * next claim resumes its attempt; past maxWait (counted from the attempt's ConditionPending start)
 * it fails with PRECONDITION_TIMEOUT, and an expression that cannot be evaluated fails it with
 * PRECONDITION_ERROR (neither is retried).
 */
@Injectable()
export class PreconditionsService {
  constructor(
    private readonly db: Database,
    private readonly engine: EngineRepository,
    private readonly store: EngineStore,
  ) {}

  async check(p: JobPayload<'ordo.engine.precondition_check'>): Promise<void> {
    const st = await this.db.withSystem((tx) => this.engine.preconditionState(tx, p));
    const pre = (st?.spec as StepSpec | undefined)?.preconditions;
    if (!st || st.status !== 'waiting' || st.epoch !== p.epoch || !pre) return;
    const target: RunDataTarget = {
      tenantId: p.tenantId,
      runId: p.runId,
      needsData: true,
      dependsOn: st.depends_on,
      inputs: {},
      upstream: {},
    };
    await this.store.loadRunData([target]);
    const now = new Date();
    const verdict = checkPreconditions(pre, conditionScope(target.inputs, target.upstream), now);
    const data = { ...verdict.data, check: p.check };
    const waited = now.getTime() - (st.condition_pending_at ?? now).getTime();
    const key = { tenantId: p.tenantId, runId: p.runId, stepId: p.stepId, epoch: p.epoch };
    if (verdict.outcome === 'held' || (verdict.outcome === 'false' && waited < (pre.maxWait ?? 0))) {
      await this.db.withSystem((tx) =>
        this.engine.preconditionChecked(tx, {
          ...key,
          check: p.check,
          holds: verdict.outcome === 'held',
          nextMs: Math.max(0, Math.min(pre.checkEvery, (pre.maxWait ?? 0) - waited)),
          data: canonicalJson(data),
        }),
      );
      return;
    }
    const timedOut = verdict.outcome === 'false';
    const failed = completionFor({ ...key, attempt: st.attempts }, 'engine', {
      status: 'failed',
      error: {
        code: timedOut ? 'PRECONDITION_TIMEOUT' : 'PRECONDITION_ERROR',
        message: timedOut ? `${verdict.message} after waiting its maxWait of ${pre.maxWait} ms` : verdict.message,
        retryable: false,
      },
      logs: [],
    });
    await this.store.resolve(failed, {
      type: 'step.precondition_checked',
      data: timedOut ? { ...data, timedOut: true } : data,
    });
  }
}
