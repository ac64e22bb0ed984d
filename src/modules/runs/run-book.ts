import type { JsonObject } from '../plugins/plugin';
import { chain, type ChainedEvent, type EventDraft } from './run-events';
import type { RunBookRow, RunBookUpdate } from './runs.repository';
import { assertTransition, type RunStatus } from './state-machine';

export interface Book {
  row: RunBookRow;
  status: RunStatus;
  eventSeq: number;
  eventHash: string;
  dispatchCount: number;
  stepsRemaining: number;
  stepsFailed: number;
  started: boolean;
  finished: boolean;
  reason: string | null;
  outputsHash: string | null;
  dirty: boolean;
}

export const runKey = (tenantId: string, runId: string) => `${tenantId}/${runId}`;

/**
 * The locked runs of one transaction: numbers and chains their events and tracks their counters,
 * then hands back one bulk event insert and one bulk run update. Run status changes go through
 * the transition table here (and again through the database trigger).
 */
export class RunBooks {
  private readonly books = new Map<string, Book>();
  private readonly pending: ChainedEvent[] = [];
  readonly now = new Date();

  constructor(rows: RunBookRow[]) {
    this.add(rows);
  }

  /** Adds runs locked later in the same transaction. */
  add(rows: RunBookRow[]): void {
    for (const row of rows) {
      if (this.books.has(runKey(row.tenant_id, row.run_id))) continue;
      this.books.set(runKey(row.tenant_id, row.run_id), {
        row,
        status: row.status as RunStatus,
        eventSeq: row.event_seq,
        eventHash: row.event_hash,
        dispatchCount: row.dispatch_count,
        stepsRemaining: row.steps_remaining,
        stepsFailed: row.steps_failed,
        started: false,
        finished: false,
        reason: null,
        outputsHash: null,
        dirty: false,
      });
    }
  }

  get(tenantId: string, runId: string): Book | undefined {
    return this.books.get(runKey(tenantId, runId));
  }

  all(): Book[] {
    return [...this.books.values()];
  }

  event(b: Book, draft: EventDraft): void {
    const [e] = chain(b.row.tenant_id, b.row.run_id, { seq: b.eventSeq, hash: b.eventHash }, [draft], this.now);
    b.eventSeq = e.seq;
    b.eventHash = e.hash;
    b.dirty = true;
    this.pending.push(e);
  }

  /** Moves the run to `to` (refused with ILLEGAL_TRANSITION when the table does not allow it) and records it. */
  transition(b: Book, to: RunStatus, actor: string, data: JsonObject = {}): void {
    assertTransition('run', b.status, to);
    b.status = to;
    b.dirty = true;
    if (to === 'running') b.started = true;
    if (to === 'succeeded' || to === 'failed' || to === 'cancelled') b.finished = true;
    this.event(b, { type: `run.${to}`, actor, data });
  }

  isActive(b: Book): boolean {
    return b.status === 'queued' || b.status === 'running';
  }

  events(): ChainedEvent[] {
    return this.pending;
  }

  updates(): RunBookUpdate[] {
    return this.all()
      .filter((b) => b.dirty)
      .map((b) => ({
        tenantId: b.row.tenant_id,
        runId: b.row.run_id,
        status: b.status,
        eventSeq: b.eventSeq,
        eventHash: b.eventHash,
        dispatchCount: b.dispatchCount,
        stepsRemaining: b.stepsRemaining,
        stepsFailed: b.stepsFailed,
        started: b.started,
        finished: b.finished,
        reason: b.reason,
        outputsHash: b.outputsHash,
      }));
  }
}
