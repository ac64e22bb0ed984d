// The rule of a run's event chain without the hashing itself: the API hashes with node:crypto
// (run-events.ts), the web console with WebCrypto, both over the text this module builds. It has no
// Node import so that the console's bundle takes it as it is. db/functions/ordo_event_hash.sql is
// the SQL side, held to it by test/medium/event-hash.test.ts.
import { canonicalJson } from '../../core/json/jcs';
import type { JsonObject } from '../../core/json/json-value';

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

/** The fields of an event its hash covers (everything but the hashes and the tenant). */
export type HashedFields = Omit<ChainedEvent, 'prevHash' | 'hash' | 'tenantId'>;

/** The part of an event its hash covers. */
export function hashedBody(e: HashedFields): JsonObject {
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

/** The text an event's hash is the SHA-256 (lowercase hex) of: prev_hash, then the canonical JSON of its body. */
export function chainInput(prevHash: string, body: JsonObject): string {
  return prevHash + canonicalJson(body);
}

export type ChainCheck = { ok: true } | { ok: false; seq: number; problem: string };
type Chained = HashedFields & { prevHash: string; hash: string };

/**
 * The text each event of a run's chain (from seq 1) must hash to its `hash`: each input follows
 * the previous event's stated hash, so all of them are known before any is hashed.
 */
export function chainInputs(events: Chained[]): string[] {
  return events.map((e, i) => chainInput(i === 0 ? '' : events[i - 1].hash, hashedBody(e)));
}

/**
 * Checks a run's events, from seq 1, given the SHA-256 of each of chainInputs(events): seq 1..n
 * without gaps and every hash linking to the previous one. Names the first broken link.
 */
export function checkChain(events: Chained[], computed: string[]): ChainCheck {
  let prev = '';
  for (let i = 0; i < events.length; i++) {
    const e = events[i];
    if (e.seq !== i + 1) return { ok: false, seq: e.seq, problem: `expected seq ${String(i + 1)}` };
    if (e.prevHash !== prev) return { ok: false, seq: e.seq, problem: 'prev_hash does not match the previous event' };
    if (computed[i] !== e.hash) return { ok: false, seq: e.seq, problem: 'hash does not match the event' };
    prev = e.hash;
  }
  return { ok: true };
}
