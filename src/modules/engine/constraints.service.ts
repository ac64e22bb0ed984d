import { Injectable, Logger } from '@nestjs/common';
import { createHmac, randomBytes } from 'node:crypto';
import http from 'node:http';
import https from 'node:https';
import { Database } from '../../core/database/database';
import type { ConstraintAction } from '../dags/dag-definition';
import type { JsonObject } from '../plugins/plugin';
import { RunBooks } from '../runs/run-book';
import type { StepSpec } from '../runs/run-plan';
import { RunsRepository } from '../runs/runs.repository';
import { checkEgress, EgressError, pinnedLookup, type EgressTarget } from '../sandbox/egress';
import { SandboxService } from '../sandbox/sandbox.module';
import { EngineRepository } from './engine.repository';
import type { ClaimedWork } from './engine.store';
import { JOBS, type JobPayload } from './jobs';

export const WEBHOOK_SIGNATURE_HEADER = 'x-ordo-signature';
export const WEBHOOK_TIMESTAMP_HEADER = 'x-ordo-timestamp';

/**
 * Pre-execution constraints (the record of preconditions that held) and post-execution constraints of a running step (maxExpectedRunTime, maxAllowedRunTime): each
 * breach appends an event to the run and, for webhook actions, a webhook job in the same
 * transaction. Webhooks POST the event as JSON signed with the tenant's secret
 * (`x-ordo-signature: sha256=<hex HMAC-SHA256 of "<timestamp>.<body>">`), retried with backoff by graphile-worker.
 */
@Injectable()
export class ConstraintsService {
  private readonly log = new Logger('constraints');

  constructor(
    private readonly db: Database,
    private readonly engine: EngineRepository,
    private readonly runs: RunsRepository,
    private readonly sandbox: SandboxService,
  ) {}

  async breached(
    w: ClaimedWork,
    constraint: 'maxExpectedRunTime' | 'maxAllowedRunTime',
    afterMs: number,
    actions: ConstraintAction[],
    /** What the breach does to the step: only recorded (warned), or the step was stopped and killed (failed), failed or skipped. */
    effect: 'warned' | 'killed' | 'failed' | 'skipped',
  ): Promise<void> {
    try {
      await this.db.withSystem(async (tx) => {
        const books = new RunBooks(await this.runs.lockRuns(tx, [{ tenantId: w.tenantId, runId: w.runId }]));
        const b = books.get(w.tenantId, w.runId);
        if (!b) return;
        const [st] = await this.engine.stepStates(tx, [w]);
        if (!st || st.status !== 'running' || st.epoch !== w.epoch) return;
        const base: JsonObject = { constraint, afterMs, effect };
        books.event(b, {
          type: 'step.constraint_breached',
          stepId: w.stepId,
          attempt: w.attempt,
          actor: 'engine',
          data: base,
        });
        const hooks: JobPayload<'ordo.engine.webhook'>[] = [];
        for (const a of actions) {
          if (a.type !== 'webhook') continue;
          books.event(b, {
            type: 'step.constraint_webhook',
            stepId: w.stepId,
            attempt: w.attempt,
            actor: 'engine',
            data: { ...base, url: a.url },
          });
          hooks.push({ tenantId: w.tenantId, runId: w.runId, seq: b.eventSeq });
        }
        await this.runs.insertEvents(tx, books.events());
        await this.runs.updateRunBooks(tx, books.updates());
        for (const p of hooks) {
          const spec = JOBS['ordo.engine.webhook'];
          await this.engine.addJob(tx, 'ordo.engine.webhook', p, {
            jobKey: spec.jobKey(p),
            maxAttempts: spec.maxAttempts,
          });
        }
      });
    } catch (e) {
      this.log.error({ err: e, runId: w.runId, stepId: w.stepId }, 'recording a constraint breach failed');
    }
  }

  /**
   * Records the check of a step's preconditions that found them holding when it was claimed
   * (`step.precondition_checked`): the checks that do not hold are recorded with the result they
   * give (skipped, failed, waiting), the later checks of a waiting step by PreconditionsService.
   */
  async preconditionHeld(w: ClaimedWork, data: JsonObject): Promise<void> {
    try {
      await this.recordHeld(w, data);
    } catch (e) {
      this.log.error({ err: e, runId: w.runId, stepId: w.stepId }, 'recording a precondition check failed');
    }
  }

  private async recordHeld(w: ClaimedWork, data: JsonObject): Promise<void> {
    await this.db.withSystem(async (tx) => {
      const books = new RunBooks(await this.runs.lockRuns(tx, [{ tenantId: w.tenantId, runId: w.runId }]));
      const b = books.get(w.tenantId, w.runId);
      if (!b) return;
      const [st] = await this.engine.stepStates(tx, [w]);
      if (!st || st.status !== 'running' || st.epoch !== w.epoch) return;
      books.event(b, {
        type: 'step.precondition_checked',
        stepId: w.stepId,
        attempt: w.attempt,
        actor: 'engine',
        data,
      });
      await this.runs.insertEvents(tx, books.events());
      await this.runs.updateRunBooks(tx, books.updates());
    });
  }

  /** Delivers one webhook event; throws (so graphile-worker retries with backoff) unless the receiver answers 2xx. */
  async deliver(p: JobPayload<'ordo.engine.webhook'>): Promise<void> {
    const { event, secret, egress } = await this.db.withSystem(async (tx) => {
      const ev = await this.engine.event(tx, p.tenantId, p.runId, p.seq);
      const [st] = ev?.step_id
        ? await this.engine.stepStates(tx, [{ tenantId: p.tenantId, runId: p.runId, stepId: ev.step_id }])
        : [];
      return {
        event: ev,
        secret: await this.engine.webhookSecret(tx, p.tenantId, randomBytes(32).toString('base64url')),
        egress: (st?.spec as StepSpec | undefined)?.egress ?? [],
      };
    });
    if (!event) return;
    const data = event.data as { url?: string };
    if (!data.url) return;
    // The webhook host must be in the step's egress list and resolve to an allowed address, which
    // the connection is then pinned to; a denied webhook is recorded and not retried.
    let target: EgressTarget;
    try {
      target = await checkEgress(data.url, egress, this.sandbox.egress);
    } catch (e) {
      if (!(e instanceof EgressError)) throw e;
      await this.recordDenied(p, event.step_id, data.url, e.message);
      return;
    }
    const body = JSON.stringify({
      tenantId: p.tenantId,
      runId: p.runId,
      seq: p.seq,
      type: event.type,
      stepId: event.step_id,
      createdAt: new Date(event.created_at).toISOString(),
      data: event.data,
      hash: event.hash,
    });
    const ts = Math.floor(Date.now() / 1000).toString();
    const status = await postPinned(target, body, {
      'content-type': 'application/json',
      [WEBHOOK_TIMESTAMP_HEADER]: ts,
      [WEBHOOK_SIGNATURE_HEADER]: `sha256=${signWebhook(secret, ts, body)}`,
    });
    if (status < 200 || status >= 300) throw new Error(`webhook ${data.url} answered ${status}`);
  }

  private async recordDenied(
    p: JobPayload<'ordo.engine.webhook'>,
    stepId: string | null,
    url: string,
    reason: string,
  ): Promise<void> {
    await this.db.withSystem(async (tx) => {
      const books = new RunBooks(await this.runs.lockRuns(tx, [{ tenantId: p.tenantId, runId: p.runId }]));
      const b = books.get(p.tenantId, p.runId);
      if (!b) return;
      books.event(b, {
        type: 'step.constraint_webhook_denied',
        stepId,
        actor: 'engine',
        data: { url, reason, eventSeq: p.seq },
      });
      await this.runs.insertEvents(tx, books.events());
      await this.runs.updateRunBooks(tx, books.updates());
    });
  }
}

/** POSTs `body` to the checked target, connecting only to its pinned address; resolves with the status. */
function postPinned(target: EgressTarget, body: string, headers: Record<string, string>): Promise<number> {
  const mod = target.url.protocol === 'https:' ? https : http;
  return new Promise((resolve, reject) => {
    const req = mod.request(
      target.url,
      {
        method: 'POST',
        headers: { ...headers, 'content-length': Buffer.byteLength(body).toString() },
        lookup: pinnedLookup(target),
        timeout: 10_000,
      },
      (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode ?? 0));
        res.on('error', reject);
      },
    );
    req.on('timeout', () => req.destroy(new Error('webhook timed out')));
    req.on('error', reject);
    req.end(body);
  });
}

export function signWebhook(secret: string, timestamp: string, body: string): string {
  return createHmac('sha256', secret).update(`${timestamp}.${body}`).digest('hex');
}
