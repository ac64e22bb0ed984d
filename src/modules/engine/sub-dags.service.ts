import { Inject, Injectable } from '@nestjs/common';
import { ORDO_CONFIG } from '../../core/config/config.module';
import type { OrdoConfig } from '../../core/config/config';
import { Database } from '../../core/database/database';
import { DomainError } from '../../core/errors/domain-error';
import { ArtifactsRepository } from '../artifacts/artifacts.repository';
import type { JsonObject, PluginResult, WaitRequest } from '../plugins/plugin';
import { RunsService } from '../runs/runs.service';
import { EngineRepository } from './engine.repository';
import { completionFor, EngineStore, type ClaimedWork, type Completion } from './engine.store';
import type { JobPayload } from './jobs';
import { SubDagsRepository } from './sub-dags.repository';

/** A `dag` step's config, templated and checked (see plugins/dag). */
export interface DagStepConfig {
  dag: string;
  version: number | 'latest';
  inputs: Record<string, unknown>;
}

/** The run token of the child run of `stepId` of `runId`: one child per step, whatever its deliveries. */
export const childRunToken = (runId: string, stepId: string): string => `dag:${runId}:${stepId}`;

const TERMINAL = ['succeeded', 'failed', 'cancelled'];

/**
 * Sub-DAGs: a `dag` step starts its child run (a run of another DAG version of the tenant, linked
 * to the step and one level deeper) and waits for it, holding no slot and no lease; the child's
 * end resumes the step (ordo.engine.child_ended) with the child's outputs, or fails it
 * CHILD_RUN_FAILED.
 */
@Injectable()
export class SubDagsService {
  private readonly maxDepth: number;

  constructor(
    @Inject(ORDO_CONFIG) config: OrdoConfig,
    private readonly db: Database,
    private readonly runs: RunsService,
    private readonly repo: SubDagsRepository,
    private readonly engine: EngineRepository,
    private readonly artifacts: ArtifactsRepository,
    private readonly store: EngineStore,
  ) {
    this.maxDepth = config.ORDO_SUBDAG_MAX_DEPTH;
  }

  /**
   * Starts (or finds, when the step is delivered again) the child run of `w`: what the step waits
   * for, or why it fails (too deep, inputs the child DAG refuses, a child DAG gone or disabled).
   */
  async start(w: ClaimedWork, cfg: DagStepConfig): Promise<WaitRequest | PluginResult> {
    const depth = (await this.db.withSystem((tx) => this.repo.depth(tx, w.tenantId, w.runId))) + 1;
    if (depth > this.maxDepth)
      return failed(
        'SUBDAG_DEPTH_EXCEEDED',
        `a child run of ${cfg.dag} would be ${depth} levels deep; at most ${this.maxDepth} are allowed`,
      );
    try {
      const child = await this.runs.createChild(
        w.tenantId,
        {
          dagId: cfg.dag,
          ...(typeof cfg.version === 'number' ? { version: cfg.version } : {}),
          inputs: cfg.inputs,
          runToken: childRunToken(w.runId, w.stepId),
          requestedBy: `run:${w.runId}`,
        },
        { runId: w.runId, stepId: w.stepId, depth },
      );
      return {
        kind: 'dag',
        dag: cfg.dag,
        version: cfg.version === 'latest' ? 0 : cfg.version,
        childRunId: child.runId,
      };
    } catch (e) {
      if (!(e instanceof DomainError)) throw e;
      return failed(e.code === 'INVALID_INPUTS' ? 'CHILD_INPUTS_INVALID' : `CHILD_${e.code}`, e.message);
    }
  }

  /** A child run ended: its parent's step, while it waits for that child, ends with the child's outcome. */
  async childEnded(p: JobPayload<'ordo.engine.child_ended'>): Promise<void> {
    const { tenantId, runId, stepId, childRunId } = p;
    const found = await this.db.withSystem(async (tx) => {
      const [st] = await this.engine.stepStates(tx, [{ tenantId, runId, stepId }]);
      const child = await this.repo.childRun(tx, tenantId, childRunId);
      if (!st || !child || child.parent_run_id !== runId || child.parent_step_id !== stepId) return null;
      if (child.status !== 'succeeded' || st.status !== 'waiting') return { st, child, outputs: null };
      const rows = await this.repo.stepOutputs(tx, tenantId, childRunId);
      const large = rows
        .filter((r) => r.outputs === null && r.outputs_hash !== null)
        .map((r) => ({ tenantId, sha256: r.outputs_hash! }));
      const bodies = await this.artifacts.jsonBodies(tx, large);
      const outputs: JsonObject = {};
      for (const r of rows)
        outputs[r.step_id] = (r.outputs ?? bodies.get(`${tenantId}/${r.outputs_hash}`) ?? {}) as JsonObject;
      return { st, child, outputs };
    });
    if (!found || !TERMINAL.includes(found.child.status)) return;
    const { st, child, outputs } = found;
    // The step has not yet been handed back to wait (its worker reports it): this job runs again.
    if (st.status === 'running') throw new Error(`step ${stepId} of run ${runId} is not waiting for its child yet`);
    if (st.status !== 'waiting') return;
    const key = { tenantId, runId, stepId, attempt: st.attempts, epoch: st.epoch };
    const now = new Date();
    const outcome: Completion['outcome'] =
      child.status === 'succeeded'
        ? {
            status: 'succeeded',
            // (The child's run id is in the step's record and events, not its outputs: they hash the same on every run.)
            outputs: {
              dagId: child.dag_id,
              version: child.dag_version,
              outputsHash: child.outputs_hash,
              steps: outputs ?? {},
            },
            logs: [],
          }
        : {
            status: 'failed',
            error: {
              code: 'CHILD_RUN_FAILED',
              message: `child run ${child.run_id} (${child.dag_id} v${child.dag_version}) ended ${child.status}`,
              retryable: false,
            },
            logs: [],
          };
    await this.store.resolve(completionFor(key, 'engine', outcome, now, now), {
      type: 'step.child_ended',
      data: { childRunId: child.run_id, status: child.status, outputsHash: child.outputs_hash },
    });
  }
}

function failed(code: string, message: string): PluginResult {
  return { status: 'failed', error: { code, message, retryable: false }, outputs: {} };
}
