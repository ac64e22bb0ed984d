import { Injectable } from '@nestjs/common';
import { sql } from 'kysely';
import { tenantOf, type SystemTx, type TenantTx } from '../../core/database/handles';
import type { JsonValue } from '../plugins/plugin';

/** A signal as stored: pending while run_id is null, else delivered to that run's step. */
export interface SignalRow {
  tenant_id: string;
  signal_id: string;
  name: string;
  correlation_key: string;
  payload: JsonValue;
  sent_by: string;
  received_at: Date;
  run_id: string | null;
  step_id: string | null;
  delivered_at: Date | null;
}

/** A registered wait, with the state of its step now. */
export interface WaitRow {
  run_id: string;
  step_id: string;
  epoch: number;
  status: string | null;
  step_epoch: number | null;
  attempts: number | null;
}

/** A step as a signal's delivery or timeout needs it. */
export interface SignalStep {
  plugin: string;
  status: string;
  epoch: number;
  attempts: number;
  config: unknown;
}

const COLUMNS = sql`tenant_id, signal_id, name, correlation_key, payload, sent_by, received_at, run_id, step_id, delivered_at`;

/**
 * The signal and signal_wait tables. Every statement that changes them runs under the key's lock
 * (lockKey), in a system transaction, naming the tenant; reads for the API go through the
 * tenant's own transaction.
 */
@Injectable()
export class SignalsRepository {
  /** The transaction advisory lock of (tenant, name, correlation key): signals and waits of a key meet under it. */
  async lockKey(tx: SystemTx, tenantId: string, name: string, key: string): Promise<void> {
    await sql`select pg_advisory_xact_lock(hashtextextended(jsonb_build_array(${tenantId}::text, ${name}::text, ${key}::text)::text, 30))`.execute(
      tx,
    );
  }

  /** Inserts a pending signal unless its id is taken (then undefined: the existing one is the caller's to compare). */
  async insert(
    tx: SystemTx,
    s: { tenantId: string; signalId: string; name: string; key: string; payload: JsonValue; sentBy: string },
  ): Promise<SignalRow | undefined> {
    const r = await sql<SignalRow>`
      insert into signal (tenant_id, signal_id, name, correlation_key, payload, sent_by, received_at)
      values (${s.tenantId}, ${s.signalId}, ${s.name}, ${s.key}, ${JSON.stringify(s.payload)}::jsonb, ${s.sentBy},
        date_trunc('milliseconds', now()))
      on conflict (tenant_id, signal_id) do nothing
      returning ${COLUMNS}`.execute(tx);
    return r.rows[0];
  }

  /** Whether `payload` equals the stored signal's payload as JSON (key order and number spelling aside). */
  async samePayload(tx: SystemTx, tenantId: string, signalId: string, payload: JsonValue): Promise<boolean> {
    const r = await sql<{ same: boolean }>`
      select payload = ${JSON.stringify(payload)}::jsonb as same from signal
      where tenant_id = ${tenantId} and signal_id = ${signalId}`.execute(tx);
    return r.rows[0]?.same === true;
  }

  async find(tx: SystemTx, tenantId: string, signalId: string): Promise<SignalRow | undefined> {
    const r = await sql<SignalRow>`
      select ${COLUMNS} from signal where tenant_id = ${tenantId} and signal_id = ${signalId}`.execute(tx);
    return r.rows[0];
  }

  /** A signal of the tenant, through its row-level security. */
  async get(tx: TenantTx, signalId: string): Promise<SignalRow | undefined> {
    const r = await sql<SignalRow>`
      select ${COLUMNS} from signal where tenant_id = ${tenantOf(tx)} and signal_id = ${signalId}`.execute(tx);
    return r.rows[0];
  }

  /** The signal a step that starts waiting takes: the oldest pending one of its key (received, then id). */
  async oldestPending(tx: SystemTx, tenantId: string, name: string, key: string): Promise<SignalRow | undefined> {
    const r = await sql<SignalRow>`
      select ${COLUMNS} from signal
      where tenant_id = ${tenantId} and name = ${name} and correlation_key = ${key} and run_id is null
      order by received_at, signal_id collate "C" limit 1`.execute(tx);
    return r.rows[0];
  }

  async markDelivered(tx: SystemTx, tenantId: string, signalId: string, runId: string, stepId: string): Promise<Date> {
    const r = await sql<{ delivered_at: Date }>`
      update signal set run_id = ${runId}, step_id = ${stepId}, delivered_at = date_trunc('milliseconds', now())
      where tenant_id = ${tenantId} and signal_id = ${signalId} and run_id is null
      returning delivered_at`.execute(tx);
    return r.rows[0].delivered_at;
  }

  /** The registered waits of a key in the order signals go to them (registered, then run id, step id). */
  async waits(tx: SystemTx, tenantId: string, name: string, key: string): Promise<WaitRow[]> {
    const r = await sql<WaitRow>`
      select w.run_id, w.step_id, w.epoch, s.status, s.epoch as step_epoch, s.attempts
      from signal_wait w
      left join step s on s.tenant_id = w.tenant_id and s.run_id = w.run_id and s.step_id = w.step_id
      where w.tenant_id = ${tenantId} and w.name = ${name} and w.correlation_key = ${key}
      order by w.waiting_since, w.run_id, w.step_id collate "C"`.execute(tx);
    return r.rows;
  }

  async addWait(
    tx: SystemTx,
    w: { tenantId: string; runId: string; stepId: string; epoch: number; name: string; key: string },
  ): Promise<void> {
    await sql`
      insert into signal_wait (tenant_id, run_id, step_id, epoch, name, correlation_key, waiting_since)
      values (${w.tenantId}, ${w.runId}, ${w.stepId}, ${w.epoch}, ${w.name}, ${w.key}, clock_timestamp())
      on conflict do nothing`.execute(tx);
  }

  /** Removes the registered waits of a step (every epoch). */
  async dropWaits(tx: SystemTx, tenantId: string, runId: string, stepId: string): Promise<void> {
    await sql`
      delete from signal_wait where tenant_id = ${tenantId} and run_id = ${runId} and step_id = ${stepId}`.execute(tx);
  }

  async step(tx: SystemTx, tenantId: string, runId: string, stepId: string): Promise<SignalStep | undefined> {
    const r = await sql<SignalStep>`
      select plugin, status, epoch, attempts, config from step
      where tenant_id = ${tenantId} and run_id = ${runId} and step_id = ${stepId}`.execute(tx);
    return r.rows[0];
  }
}
