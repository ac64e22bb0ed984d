import { createHash } from 'node:crypto';
import { canonicalJson } from '../../core/json/canonical-json';
import type { JsonObject } from '../plugins/plugin';

/** An event before it is numbered and chained. */
export interface EventDraft {
  type: string;
  stepId?: string | null;
  attempt?: number | null;
  actor: string;
  data?: JsonObject;
}

/** A numbered, chained event as stored in run_event. */
export interface ChainedEvent {
  tenantId: string;
  runId: string;
  seq: number;
  createdAt: string;
  type: string;
  stepId: string | null;
  attempt: number | null;
  actor: string;
  data: JsonObject;
  prevHash: string;
  hash: string;
}

/** The part of an event its hash covers (everything but the hashes). */
export function hashedBody(e: Omit<ChainedEvent, 'prevHash' | 'hash' | 'tenantId'>): JsonObject {
  return {
    runId: e.runId,
    seq: e.seq,
    createdAt: e.createdAt,
    type: e.type,
    stepId: e.stepId,
    attempt: e.attempt,
    actor: e.actor,
    data: e.data,
  };
}

/** hash = SHA-256 hex of (prev_hash || canonical JSON of the event body); the first prev_hash is ''. */
export function chainHash(prevHash: string, body: JsonObject): string {
  return createHash('sha256').update(prevHash, 'utf8').update(canonicalJson(body), 'utf8').digest('hex');
}

/** Numbers and chains drafts after a run's last event (seq, hash). */
export function chain(
  tenantId: string,
  runId: string,
  last: { seq: number; hash: string },
  drafts: EventDraft[],
  now = new Date(),
): ChainedEvent[] {
  const createdAt = now.toISOString();
  let { seq, hash } = last;
  return drafts.map((d) => {
    seq += 1;
    const body = {
      runId,
      seq,
      createdAt,
      type: d.type,
      stepId: d.stepId ?? null,
      attempt: d.attempt ?? null,
      actor: d.actor,
      data: d.data ?? {},
    };
    const prevHash = hash;
    hash = chainHash(prevHash, body);
    return { tenantId, ...body, prevHash, hash };
  });
}

/** Checks a run's events: seq 1..n without gaps and every hash linking to the previous one. */
export function verifyChain(events: ChainedEvent[]): { ok: true } | { ok: false; seq: number; problem: string } {
  let prev = '';
  for (let i = 0; i < events.length; i++) {
    const e = events[i];
    if (e.seq !== i + 1) return { ok: false, seq: e.seq, problem: `expected seq ${i + 1}` };
    if (e.prevHash !== prev) return { ok: false, seq: e.seq, problem: 'prev_hash does not match the previous event' };
    if (chainHash(prev, hashedBody(e)) !== e.hash)
      return { ok: false, seq: e.seq, problem: 'hash does not match the event' };
    prev = e.hash;
  }
  return { ok: true };
}
