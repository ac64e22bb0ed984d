import { randomUUID } from 'node:crypto';
import { Injectable } from '@nestjs/common';
import { Database } from '../../core/database/database';
import type { SystemTx } from '../../core/database/handles';
import { canonicalJson } from '../../core/json/canonical-json';
import { conflict, DomainError, notFound } from '../../core/errors/domain-error';
import { MAX_SIGNAL_PAYLOAD_BYTES } from './signal-names';
import type { JsonObject, JsonValue } from '../plugins/plugin';
import { completionFor, EngineStore, type Completion } from './engine.store';
import type { JobPayload } from './jobs';
import { SignalsRepository, type SignalRow } from './signals.repository';

/** A signal as the API shows it. */
export interface SignalView {
  signalId: string;
  name: string;
  correlationKey: string;
  payload: JsonValue;
  sentBy: string;
  receivedUtc: string;
  status: 'pending' | 'delivered';
  delivery: { runId: string; stepId: string; deliveredUtc: string } | null;
}

type Resolve = (result: Completion, decided: { type: string; data: JsonObject }) => Promise<boolean>;

/**
 * Signals and the signal steps that wait for them. A signal goes to one step: the waiting step of
 * its (name, correlation key) that registered its wait first (then by run id, step id); one that
 * arrives while no step waits is kept, and a step that starts waiting takes the oldest kept signal
 * of its key (by received time, then id). Posting a signal and registering a wait both hold the
 * key's transaction advisory lock, so each sees what the other committed. The step succeeds with
 * outputs `{payload, signalId, receivedAt}` after a `step.signalled` event.
 */
@Injectable()
export class SignalsService {
  constructor(
    private readonly db: Database,
    private readonly store: EngineStore,
    private readonly signals: SignalsRepository,
  ) {}

  /**
   * Posts a signal by `sentBy`: delivered at once to a waiting step of its key, or kept. Idempotent
   * on the signal id: the same id with the same content answers the stored signal and writes
   * nothing; with other content it is 409 SIGNAL_CONFLICT.
   */
  async send(
    tenantId: string,
    sentBy: string,
    s: { signalId?: string; name: string; correlationKey: string; payload: JsonValue },
  ): Promise<{ signal: SignalView; created: boolean }> {
    const bytes = Buffer.byteLength(canonicalJson(s.payload), 'utf8');
    if (bytes > MAX_SIGNAL_PAYLOAD_BYTES)
      throw new DomainError(
        'SIGNAL_PAYLOAD_TOO_LARGE',
        `the payload is ${bytes} bytes as canonical JSON; at most ${MAX_SIGNAL_PAYLOAD_BYTES}`,
        413,
      );
    const signalId = s.signalId ?? randomUUID();
    return this.store.withResolve(async (tx, resolve) => {
      await this.signals.lockKey(tx, tenantId, s.name, s.correlationKey);
      const row = await this.signals.insert(tx, {
        tenantId,
        signalId,
        name: s.name,
        key: s.correlationKey,
        payload: s.payload,
        sentBy,
      });
      if (!row) {
        const stored = (await this.signals.find(tx, tenantId, signalId))!;
        const same =
          stored.name === s.name &&
          stored.correlation_key === s.correlationKey &&
          (await this.signals.samePayload(tx, tenantId, signalId, s.payload));
        if (!same)
          throw conflict('SIGNAL_CONFLICT', `signal ${signalId} was posted before with another name, key or payload`);
        return { signal: view(stored), created: false };
      }
      for (const w of await this.signals.waits(tx, tenantId, s.name, s.correlationKey)) {
        await this.signals.dropWaits(tx, tenantId, w.run_id, w.step_id);
        if (w.status !== 'waiting' || w.step_epoch !== w.epoch) continue;
        const key = { tenantId, runId: w.run_id, stepId: w.step_id, epoch: w.epoch, attempt: w.attempts! };
        const delivered = await this.deliver(tx, resolve, row, key);
        if (delivered) return { signal: view(delivered), created: true };
      }
      return { signal: view(row), created: true };
    });
  }

  /** A signal of the tenant (404 SIGNAL_NOT_FOUND, also for another tenant's). */
  async get(tenantId: string, signalId: string): Promise<SignalView> {
    const row = await this.db.withTenant(tenantId, (tx) => this.signals.get(tx, signalId));
    if (!row) throw notFound(`signal ${signalId}`, 'SIGNAL_NOT_FOUND');
    return view(row);
  }

  /** A signal step started waiting: it takes the oldest kept signal of its key, or registers its wait. */
  async waiting(p: JobPayload<'ordo.engine.signal_wait'>): Promise<void> {
    await this.store.withResolve(async (tx, resolve) => {
      await this.signals.lockKey(tx, p.tenantId, p.name, p.correlationKey);
      const st = await this.signals.step(tx, p.tenantId, p.runId, p.stepId);
      if (!st || st.status !== 'waiting' || st.epoch !== p.epoch) return;
      const key = { tenantId: p.tenantId, runId: p.runId, stepId: p.stepId, epoch: p.epoch, attempt: st.attempts };
      const kept = await this.signals.oldestPending(tx, p.tenantId, p.name, p.correlationKey);
      if (kept && (await this.deliver(tx, resolve, kept, key))) return;
      await this.signals.addWait(tx, { ...key, name: p.name, key: p.correlationKey });
    });
  }

  /**
   * The wait of a step timed out (the shared ordo.engine.step_timeout job): a signal step succeeds
   * with its `defaultPayload`, or fails (SIGNAL_TIMEOUT). False when the step is not a signal step.
   */
  async timeout(p: JobPayload<'ordo.engine.step_timeout'>): Promise<boolean> {
    return this.store.withResolve(async (tx, resolve) => {
      const st = await this.signals.step(tx, p.tenantId, p.runId, p.stepId);
      if (!st || st.plugin !== 'signal') return false;
      if (st.status !== 'waiting' || st.epoch !== p.epoch) return true;
      await this.signals.dropWaits(tx, p.tenantId, p.runId, p.stepId);
      const key = { ...p, attempt: st.attempts };
      const config = (st.config ?? {}) as { defaultPayload?: JsonValue };
      const now = new Date();
      const result: Completion =
        config.defaultPayload !== undefined
          ? completionFor(
              key,
              'engine',
              {
                status: 'succeeded',
                outputs: { payload: config.defaultPayload, signalId: null, receivedAt: null },
                logs: [],
              },
              now,
              now,
            )
          : completionFor(key, 'engine', {
              status: 'failed',
              error: { code: 'SIGNAL_TIMEOUT', message: 'no signal before the timeout', retryable: false },
              logs: [],
            });
      await resolve(result, { type: 'step.timed_out', data: { epoch: p.epoch } });
      return true;
    });
  }

  /**
   * Delivers `signal` to the step at `key` (which must still wait at its epoch): `step.signalled`
   * (actor: who sent it), the step's success, the signal marked delivered. Undefined, having
   * written nothing, when the step no longer waits.
   */
  private async deliver(
    tx: SystemTx,
    resolve: Resolve,
    signal: SignalRow,
    key: { tenantId: string; runId: string; stepId: string; epoch: number; attempt: number },
  ): Promise<SignalRow | undefined> {
    const receivedAt = signal.received_at.toISOString();
    const outputs: JsonObject = { payload: signal.payload, signalId: signal.signal_id, receivedAt };
    const now = new Date();
    const result = completionFor(key, signal.sent_by, { status: 'succeeded', outputs, logs: [] }, now, now);
    const data: JsonObject = {
      signalId: signal.signal_id,
      name: signal.name,
      correlationKey: signal.correlation_key,
      payload: signal.payload,
      receivedAt,
    };
    if (!(await resolve(result, { type: 'step.signalled', data }))) return undefined;
    const at = await this.signals.markDelivered(tx, key.tenantId, signal.signal_id, key.runId, key.stepId);
    return { ...signal, run_id: key.runId, step_id: key.stepId, delivered_at: at };
  }
}

function view(r: SignalRow): SignalView {
  return {
    signalId: r.signal_id,
    name: r.name,
    correlationKey: r.correlation_key,
    payload: r.payload,
    sentBy: r.sent_by,
    receivedUtc: r.received_at.toISOString(),
    status: r.run_id === null ? 'pending' : 'delivered',
    delivery:
      r.run_id === null
        ? null
        : { runId: r.run_id, stepId: r.step_id!, deliveredUtc: (r.delivered_at as Date).toISOString() },
  };
}
