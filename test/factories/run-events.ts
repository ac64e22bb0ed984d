import { createHash, randomBytes, randomUUID } from 'node:crypto';
import { sql } from 'kysely';
import type { SystemDb } from '../../src/core/database/handles';
import { canonicalJson } from '../../src/core/json/canonical-json';

/** A run row inserted directly (system role), for tests that need runs and events without the engine. */
export interface FactoryRun {
  tenantId: string;
  runId: string;
  dagId: string;
  traceId: string;
  seq: number;
  hash: string;
}

export async function insertRun(
  db: SystemDb,
  tenantId: string,
  dagId: string,
  opts: { status?: string; createdAt?: Date; startedAt?: Date | null; finishedAt?: Date | null; inputs?: unknown } = {},
): Promise<FactoryRun> {
  const runId = randomUUID();
  const traceId = randomBytes(16).toString('hex');
  const inputs = opts.inputs ?? {};
  const createdAt = opts.createdAt ?? new Date();
  await db
    .insertInto('run')
    .values({
      tenant_id: tenantId,
      run_id: runId,
      dag_id: dagId,
      dag_version: 1,
      content_hash: 'c'.repeat(64),
      run_token: `tok-${runId}`,
      inputs: JSON.stringify(inputs),
      inputs_hash: createHash('sha256').update(canonicalJson(inputs)).digest('hex'),
      status: opts.status ?? 'running',
      trace_id: traceId,
      requested_by: 'test',
      created_at: createdAt,
      started_at: opts.startedAt === undefined ? createdAt : opts.startedAt,
      finished_at: opts.finishedAt ?? null,
      steps_total: 1,
      steps_remaining: 1,
    })
    .execute();
  return { tenantId, runId, dagId, traceId, seq: 0, hash: '' };
}

export interface EventSpec {
  type: string;
  stepId?: string | null;
  attempt?: number | null;
  data?: Record<string, unknown>;
  createdAt?: Date;
}

/**
 * Appends chained events to a run (hash = sha256(prev_hash || canonical JSON of the event body),
 * body = runId, seq, createdAt, type, stepId, attempt, actor, data), in one statement.
 */
export async function appendEvents(db: SystemDb, run: FactoryRun, events: EventSpec[]): Promise<void> {
  const rows = events.map((e) => {
    run.seq += 1;
    const createdAt = (e.createdAt ?? new Date()).toISOString();
    const body = {
      runId: run.runId,
      seq: run.seq,
      createdAt,
      type: e.type,
      stepId: e.stepId ?? null,
      attempt: e.attempt ?? null,
      actor: 'test',
      data: e.data ?? {},
    };
    const prev = run.hash;
    run.hash = createHash('sha256').update(prev, 'utf8').update(canonicalJson(body), 'utf8').digest('hex');
    return {
      tenant_id: run.tenantId,
      run_id: run.runId,
      seq: run.seq,
      created_at: createdAt,
      type: e.type,
      step_id: body.stepId,
      attempt: body.attempt,
      actor: 'test',
      data: JSON.stringify(body.data),
      prev_hash: prev,
      hash: run.hash,
    };
  });
  if (rows.length === 0) return;
  await db.insertInto('run_event').values(rows).execute();
  await sql`update run set event_seq = ${run.seq}, event_hash = ${run.hash} where tenant_id = ${run.tenantId} and run_id = ${run.runId}`.execute(
    db,
  );
}

/**
 * A step of a run with one finished attempt, its logs artifact (when given) and the stored span of
 * the attempt's plugin call (its step span is derived from the attempt by the export).
 */
export async function insertStepWithAttempt(
  db: SystemDb,
  run: FactoryRun,
  stepId: string,
  opts: { topoIndex?: number; config?: Record<string, unknown>; logs?: string; status?: string; at?: Date } = {},
): Promise<void> {
  const at = opts.at ?? new Date();
  const logsHash = opts.logs === undefined ? null : createHash('sha256').update(opts.logs).digest('hex');
  if (opts.logs !== undefined && logsHash) {
    await db
      .insertInto('artifact')
      .values({
        tenant_id: run.tenantId,
        sha256: logsHash,
        media_type: 'text/plain',
        size: Buffer.byteLength(opts.logs),
        body_bytes: Buffer.from(opts.logs),
        // Stored on the day of the step it is made for, as the engine stores it.
        created_on: at.toISOString().slice(0, 10),
        created_at: at,
      })
      .onConflict((oc) => oc.doNothing())
      .execute();
  }
  const status = opts.status ?? 'succeeded';
  await db
    .insertInto('step')
    .values({
      tenant_id: run.tenantId,
      run_id: run.runId,
      step_id: stepId,
      status,
      plugin: 'noop',
      config: JSON.stringify(opts.config ?? {}),
      spec: JSON.stringify({}),
      depends_on: [],
      topo_index: opts.topoIndex ?? 0,
      pending_deps: 0,
      dispatch_seq: (opts.topoIndex ?? 0) + 1,
      attempts: 1,
      logs_hash: logsHash,
      queued_at: new Date(at.getTime() - 300),
      started_at: new Date(at.getTime() - 200),
      finished_at: at,
    })
    .execute();
  await db
    .insertInto('attempt')
    .values({
      tenant_id: run.tenantId,
      run_id: run.runId,
      step_id: stepId,
      attempt: 1,
      created_at: new Date(at.getTime() - 250),
      epoch: 1,
      worker_id: 'w1',
      status,
      lease_expires_at: new Date(at.getTime() + 30_000),
      traceparent: `00-${run.traceId}-${'1'.repeat(16)}-01`,
      queued_at: new Date(at.getTime() - 300),
      claimed_at: new Date(at.getTime() - 250),
      started_at: new Date(at.getTime() - 200),
      finished_at: at,
      terminated_at: at,
      logs_hash: logsHash,
    })
    .execute();
  await db
    .insertInto('span')
    .values({
      tenant_id: run.tenantId,
      trace_id: run.traceId,
      span_id: createHash('sha256').update(`${run.runId}:${stepId}`).digest('hex').slice(0, 16),
      parent_span_id: '1'.repeat(16),
      name: 'orchestrator.plugin',
      kind: 0,
      run_id: run.runId,
      step_id: stepId,
      started_at: new Date(at.getTime() - 150),
      ended_at: new Date(at.getTime() - 10),
      status_code: 1,
      status_message: null,
      attributes: JSON.stringify({ tenant: run.tenantId, runId: run.runId, stepId, plugin: 'http' }),
    })
    .execute();
}
