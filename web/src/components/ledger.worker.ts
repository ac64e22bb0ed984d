// A run page's ledger worker: it reads a run's events through the API (the session cookie rides
// along; without a tenant header the API takes the session's tenant) and checks their chain, so
// that parsing thousands of events and hashing each one never holds up the page's thread.
import type { ChainCheck } from '../../../src/modules/runs/run-event-chain';
import type { RunEvent } from '../api';
import { LedgerPages, verifyLedger, type LedgerAnswer, type LedgerAsk } from './ledger-read';

const scope = self as unknown as {
  onmessage: ((e: MessageEvent<LedgerAsk>) => void) | null;
  postMessage(m: LedgerAnswer): void;
};

let pages: LedgerPages | undefined;
/** The read of the newest seq the page told early, begun then: a read of that seq takes it. */
let begun: { runId: string; known: number; read: Promise<{ events: RunEvent[]; check: ChainCheck }> } | undefined;

const readAndVerify = (p: LedgerPages, known: number) =>
  p.all(known).then(async (events) => ({ events, check: await verifyLedger(p.runId, events) }));

scope.onmessage = (e) => {
  const ask = e.data;
  if (pages?.runId !== ask.runId) pages = new LedgerPages(ask.runId);
  if (ask.kind === 'early') {
    pages.early(ask.known);
    // Once the run's newest seq is known, its events are read and checked before the page asks.
    if (ask.known > 0) {
      const read = readAndVerify(pages, ask.known);
      read.catch(() => undefined);
      begun = { runId: ask.runId, known: ask.known, read };
    }
    return;
  }
  const mine = begun?.runId === ask.runId && begun.known === ask.known ? begun.read : undefined;
  begun = undefined;
  (mine ?? readAndVerify(pages, ask.known))
    .then((r) => scope.postMessage({ id: ask.id, ...r }))
    .catch((err: unknown) =>
      scope.postMessage({ id: ask.id, error: err instanceof Error ? err.message : String(err) }),
    );
};
