import { Injectable } from '@nestjs/common';
import { Database } from '../../core/database/database';
import type { TenantTx } from '../../core/database/handles';
import { conflict, notFound } from '../../core/errors/domain-error';
import { decodePageToken, encodePageToken } from '../../core/http/page-token';
import { errorClass, type PluginError } from '../plugins/plugin';
import { RunsRepository } from '../runs/runs.repository';
import { RunsService } from '../runs/runs.service';
import type { DeadLetterDto, DeadLetterListQuery, StepErrorDto } from './deadletter.dto';
import { DeadLetterRepository, type DeadLetterRow } from './deadletter.repository';

const isAfter = (v: unknown): v is { t: string; id: string } =>
  typeof v === 'object' &&
  v !== null &&
  typeof (v as { t: unknown }).t === 'string' &&
  typeof (v as { id: unknown }).id === 'string';

/**
 * The tenant's dead-letter: failed runs of DAGs with `onFailure: deadletter`, entered by the engine
 * when the run ends. An open entry is requeued (a rerun from its failed step, through the runs'
 * rerun) or discarded, once; each is recorded on the failed run's chain with who did it.
 */
@Injectable()
export class DeadLetterService {
  constructor(
    private readonly db: Database,
    private readonly repo: DeadLetterRepository,
    private readonly runsRepo: RunsRepository,
    private readonly runs: RunsService,
  ) {}

  async list(tenantId: string, q: DeadLetterListQuery) {
    const after = decodePageToken(q.pageToken, isAfter);
    const rows = await this.db.withTenant(tenantId, (tx) =>
      this.repo.list(tx, { state: q.state, limit: q.limit + 1, after }),
    );
    const items = rows.slice(0, q.limit);
    const last = items[items.length - 1];
    return {
      items: items.map(entryDto),
      nextPageToken:
        rows.length > q.limit ? encodePageToken({ t: last.created_at.toISOString(), id: last.run_id }) : null,
    };
  }

  /** An entry with its run's failed steps: each one's error (class, code, message) and attempts. */
  async get(tenantId: string, runId: string) {
    return this.db.withTenant(tenantId, async (tx) => {
      const row = await this.repo.find(tx, runId);
      if (!row) throw notFound('dead-letter entry', 'DEADLETTER_NOT_FOUND');
      const failed = await this.failedSteps(tx, runId);
      const failedSteps = await Promise.all(
        failed.map(async (s) => ({
          stepId: s.step_id,
          attempts: s.attempts,
          error: stepError(s.error),
          attemptErrors: (await this.runsRepo.listAttempts(tx, runId, s.step_id)).map((a) => ({
            attempt: a.attempt,
            status: a.status,
            error: stepError(a.error),
          })),
        })),
      );
      return { ...entryDto(row), failedSteps };
    });
  }

  /** Reruns an open entry's run from `fromStep` (by default its first failed step); the entry is then requeued. */
  async requeue(tenantId: string, runId: string, actor: string, fromStep?: string) {
    return this.db.withTenant(tenantId, async (tx) => {
      await this.openEntry(tx, runId);
      const from = fromStep ?? (await this.failedSteps(tx, runId))[0]?.step_id;
      if (from === undefined)
        throw conflict('DEADLETTER_NO_FAILED_STEP', `run ${runId} has no failed step to rerun from`);
      const created = await this.runs.rerunIn(tx, tenantId, runId, from, actor, 'run.deadletter_requeued');
      const row = await this.repo.resolve(tx, runId, { state: 'requeued', by: actor, requeuedRunId: created.runId });
      return {
        ...entryDto(row),
        fromStep: from,
        newRun: { runId: created.runId, status: created.status, traceId: created.traceId },
      };
    });
  }

  /** Takes an open entry out of the dead-letter without rerunning it. */
  async discard(tenantId: string, runId: string, actor: string): Promise<DeadLetterDto> {
    return this.db.withTenant(tenantId, async (tx) => {
      await this.openEntry(tx, runId);
      await this.runs.recordIn(tx, tenantId, runId, { type: 'run.deadletter_discarded', actor, data: {} });
      return entryDto(await this.repo.resolve(tx, runId, { state: 'discarded', by: actor }));
    });
  }

  /** The entry, locked: 404 when the run has none, 409 when it was already requeued or discarded. */
  private async openEntry(tx: TenantTx, runId: string): Promise<DeadLetterRow> {
    const row = await this.repo.find(tx, runId, true);
    if (!row) throw notFound('dead-letter entry', 'DEADLETTER_NOT_FOUND');
    if (row.state !== 'open')
      throw conflict('DEADLETTER_RESOLVED', `the dead-letter entry of run ${runId} was already ${row.state}`);
    return row;
  }

  private async failedSteps(tx: TenantTx, runId: string) {
    return (await this.runsRepo.listSteps(tx, runId))
      .filter((s) => s.status === 'failed')
      .sort((a, b) => a.topo_index - b.topo_index || (a.step_id < b.step_id ? -1 : 1));
  }
}

function entryDto(r: DeadLetterRow): DeadLetterDto {
  return {
    runId: r.run_id,
    dagId: r.dag_id,
    version: r.dag_version,
    state: r.state as DeadLetterDto['state'],
    enteredUtc: r.created_at.toISOString(),
    resolvedUtc: r.resolved_at ? r.resolved_at.toISOString() : null,
    resolvedBy: r.resolved_by,
    requeuedRunId: r.requeued_run_id,
  };
}

/** A stored step error with its class (its own, or the one its retryable flag implies). */
function stepError(e: unknown): StepErrorDto | null {
  if (e === null || typeof e !== 'object' || typeof (e as PluginError).code !== 'string') return null;
  const p = e as PluginError;
  return {
    class: errorClass(p),
    code: p.code,
    message: p.message ?? '',
    retryable: p.retryable === true,
    ...(p.input !== undefined ? { input: p.input } : {}),
  };
}
