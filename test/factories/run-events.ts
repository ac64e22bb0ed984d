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
