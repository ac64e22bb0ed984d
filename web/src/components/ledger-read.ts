import type { JsonObject } from '../../../src/core/json/json-value';
import { chainInputs, checkChain, type ChainCheck } from '../../../src/modules/runs/run-event-chain';
import { flowApi, type RunEvent } from '../api';

const encoder = new TextEncoder();
const HEX = Array.from({ length: 256 }, (_, b) => b.toString(16).padStart(2, '0'));

async function sha256Hex(text: string): Promise<string> {
  const digest = new Uint8Array(await crypto.subtle.digest('SHA-256', encoder.encode(text)));
  let hex = '';
  for (const b of digest) hex += HEX[b];
  return hex;
}

/**
 * Checks the run's chain with the API's own rule (run-event-chain.ts builds each hashed text) and
 * WebCrypto's SHA-256: seq 1..n, each prev_hash the previous hash, each hash that of its event.
 */
export async function verifyLedger(runId: string, events: RunEvent[]): Promise<ChainCheck> {
  const chained = events.map((e) => ({ ...e, runId, createdAt: e.createdUtc, data: e.data as JsonObject }));
  const computed = await Promise.all(chainInputs(chained).map(sha256Hex));
  return checkChain(chained, computed);
}

const PAGE = 1000;
type EventPage = Awaited<ReturnType<typeof flowApi.events>>;

/**
 * A run's events in pages of 1,000. Events are numbered 1..n without gaps, so the pages up to the
 * newest seq known are asked for at once: as soon as the run page's first read of the run says
 * how many there are (`early`), side by side with drawing the run, and `all` takes them.
 */
export class LedgerPages {
  /** Pages asked for and not yet taken, by `after`: answered, not yet parsed. */
  private readonly asked = new Map<number, Promise<{ read(): Promise<EventPage> }>>();

  constructor(readonly runId: string) {}

  /** Asks for the pages up to `known` (at least the first) that are not asked for yet. */
  early(known: number): void {
    for (let after = 0; after === 0 || after < known; after += PAGE) {
      if (this.asked.has(after)) continue;
      const page = flowApi.eventsLater(this.runId, after, PAGE);
      // Whoever takes the page sees its failure; one never taken fails silently.
      page.catch(() => undefined);
      this.asked.set(after, page);
    }
  }

  private take(after: number): Promise<EventPage> {
    const asked = this.asked.get(after);
    this.asked.delete(after);
    return asked ? asked.then((p) => p.read()) : flowApi.events(this.runId, after, PAGE);
  }

  /**
   * Every event up to `known` and any that came since. A page asked for early may end before
   * the next one starts (the run went on in between): the rest is read from its last event.
   */
  async all(known: number): Promise<RunEvent[]> {
    const starts = Array.from({ length: Math.max(1, Math.ceil(known / PAGE)) }, (_, i) => i * PAGE);
    const pages = await Promise.all(starts.map((after) => this.take(after)));
    const out: RunEvent[] = [];
    let last = 0;
    let more = false;
    for (const [i, p] of pages.entries()) {
      if (starts[i] !== last) break;
      out.push(...p.items);
      last = out.at(-1)?.seq ?? last;
      more = p.nextAfter !== null;
    }
    while (more || last < known) {
      const p = await flowApi.events(this.runId, last, PAGE);
      if (p.items.length === 0) break;
      out.push(...p.items);
      last = out[out.length - 1].seq;
      more = p.nextAfter !== null;
    }
    return out;
  }
}

/** What the page asks the ledger's worker. */
export type LedgerAsk =
  { kind: 'early'; runId: string; known: number } | { kind: 'read'; id: number; runId: string; known: number };

/** The worker's answer to a read. */
export type LedgerAnswer = { id: number; events: RunEvent[]; check: ChainCheck } | { id: number; error: string };
