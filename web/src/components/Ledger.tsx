import { useEffect, useState } from 'preact/hooks';
import type { ChainCheck } from '../../../src/modules/runs/run-event-chain';
import type { RunEvent } from '../api';
import type { LedgerAnswer, LedgerAsk } from './ledger-read';
import { time } from './Status';

const SHOWN = 200;

/**
 * A run page's reader of the run's ledger: a worker (ledger.worker.ts) reads the events and
 * checks their chain off the page's thread. Told early what the page knows of the run (before
 * the run is read, then its newest seq), it asks for the pages then, side by side with the run
 * and its attempts, and has them in hand when the ledger is drawn.
 */
export class LedgerReader {
  private worker?: Worker;
  private readonly waiting = new Map<number, { resolve(a: LedgerRead): void; reject(e: Error): void }>();
  private asks = 0;

  constructor(readonly runId: string) {}

  private post(ask: LedgerAsk): void {
    if (!this.worker) {
      const w = new Worker(new URL('./ledger.worker.ts', import.meta.url), { type: 'module' });
      w.onmessage = (e: MessageEvent<LedgerAnswer>) => {
        const a = e.data;
        const waiting = this.waiting.get(a.id);
        this.waiting.delete(a.id);
        if ('error' in a) waiting?.reject(new Error(a.error));
        else waiting?.resolve({ events: a.events, check: a.check });
      };
      w.onerror = (e) => {
        for (const waiting of this.waiting.values()) waiting.reject(new Error(e.message || 'the ledger worker failed'));
        this.waiting.clear();
      };
      this.worker = w;
    }
    this.worker.postMessage(ask);
  }

  /** Asks for the pages up to `known` now (0: the first page, before the run is read). */
  early(known: number): void {
    this.post({ kind: 'early', runId: this.runId, known });
  }

  /** Every event up to `known` and any that came since, with their chain checked. */
  read(known: number): Promise<LedgerRead> {
    const id = ++this.asks;
    return new Promise((resolve, reject) => {
      this.waiting.set(id, { resolve, reject });
      this.post({ kind: 'read', id, runId: this.runId, known });
    });
  }

  close(): void {
    this.worker?.terminate();
    this.worker = undefined;
    this.waiting.clear();
  }
}

interface LedgerRead {
  events: RunEvent[];
  check: ChainCheck;
}

/**
 * The run's event ledger with each event's hash; the whole chain is verified in the browser each
 * time it is read (again when `seq`, the newest event the page knows of, moves on).
 */
export function Ledger(props: { reader: LedgerReader; seq: number }) {
  const { reader, seq } = props;
  const [events, setEvents] = useState<RunEvent[] | null>(null);
  const [check, setCheck] = useState<ChainCheck | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [shown, setShown] = useState(SHOWN);

  useEffect(() => {
    let stale = false;
    reader
      .read(seq)
      .then((r) => {
        if (stale) return;
        setEvents(r.events);
        setCheck(r.check);
      })
      .catch((e: unknown) => !stale && setError(e instanceof Error ? e.message : String(e)));
    return () => {
      stale = true;
    };
  }, [reader, seq]);

  if (error) return <p class="error">The ledger could not be read: {error}</p>;
  if (!events || !check) return <p class="muted">Reading and verifying the ledger…</p>;
  const last = events.at(-1);
  return (
    <div class="ledger">
      {check.ok ? (
        <p class="chain ok" data-testid="chain-state" role="status">
          ✓ Chain verified: {events.length} events, SHA-256 in this browser; last hash{' '}
          <code class="hash">{last?.hash ?? '(none)'}</code>
        </p>
      ) : (
        <p class="chain broken" data-testid="chain-state" role="alert">
          ✗ Chain broken at event {check.seq}: {check.problem}
        </p>
      )}
      <div class="ledger-scroll" tabIndex={0} role="region" aria-label="Events of the run">
        <table data-testid="ledger">
          <thead>
            <tr>
              <th scope="col">Seq</th>
              <th scope="col">Time</th>
              <th scope="col">Event</th>
              <th scope="col">Step</th>
              <th scope="col">Actor</th>
              <th scope="col">Data</th>
              <th scope="col">Hash</th>
            </tr>
          </thead>
          <tbody>
            {events.slice(0, shown).map((e) => (
              <tr key={e.seq} data-seq={e.seq} class={!check.ok && check.seq === e.seq ? 'broken' : ''}>
                <td>{e.seq}</td>
                <td>{time(e.createdUtc)}</td>
                <td>{e.type}</td>
                <td>
                  {e.stepId ?? ''}
                  {e.attempt !== null ? ` #${String(e.attempt)}` : ''}
                </td>
                <td>{e.actor}</td>
                <td class="mono data">{JSON.stringify(e.data)}</td>
                <td>
                  <code class="hash" title={e.hash}>
                    {e.hash.slice(0, 12)}
                  </code>
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      {events.length > shown && (
        <button type="button" onClick={() => setShown((n) => n + SHOWN * 5)}>
          Show more events ({events.length - shown} not shown)
        </button>
      )}
    </div>
  );
}
