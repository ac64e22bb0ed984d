import { createHash } from 'node:crypto';
import type { JsonObject } from '../plugins/plugin';
import { chainInput, chainInputs, checkChain, type ChainCheck, type ChainedEvent } from './run-event-chain';

export { hashedBody, type ChainedEvent } from './run-event-chain';

/** An event before it is numbered and chained. */
export interface EventDraft {
  type: string;
  stepId?: string | null;
  attempt?: number | null;
  actor: string;
  data?: JsonObject;
}

/** hash = SHA-256 hex of (prev_hash || canonical JSON of the event body); the first prev_hash is ''. */
export function chainHash(prevHash: string, body: JsonObject): string {
  return sha256Hex(chainInput(prevHash, body));
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
export function verifyChain(events: ChainedEvent[]): ChainCheck {
  return checkChain(events, chainInputs(events).map(sha256Hex));
}

function sha256Hex(text: string): string {
  return createHash('sha256').update(text, 'utf8').digest('hex');
}
