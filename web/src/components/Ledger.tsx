import { useEffect, useState } from 'preact/hooks';
import { chainInputs, checkChain, type ChainCheck } from '../../../src/modules/runs/run-event-chain';
import type { JsonObject } from '../../../src/core/json/json-value';
import { flowApi, type RunEvent } from '../api';
import { time } from './Status';

const SHOWN = 200;
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

/**
 * All of a run's events, in pages of 1,000: events are numbered 1..n without gaps, so the pages
 * up to `known` (the newest seq the page has seen) are read at once, then any that came since.
 */
async function readAll(runId: string, known: number): Promise<RunEvent[]> {
  const starts = Array.from({ length: Math.max(1, Math.ceil(known / PAGE)) }, (_, i) => i * PAGE);
  const pages = await Promise.all(starts.map((after) => flowApi.events(runId, after, PAGE)));
  const out = pages.flatMap((p) => p.items);
  let after = pages[pages.length - 1].nextAfter;
  while (after !== null) {
    const page = await flowApi.events(runId, after, PAGE);
    out.push(...page.items);
    after = page.nextAfter;
  }
  return out;
}

/**
 * The run's event ledger with each event's hash; the whole chain is verified in the browser each
 * time it is read (again when `seq`, the newest event the page knows of, moves on).
 */
export function Ledger(props: { runId: string; seq: number }) {
  const { runId, seq } = props;
  const [events, setEvents] = useState<RunEvent[] | null>(null);
  const [check, setCheck] = useState<ChainCheck | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [shown, setShown] = useState(SHOWN);

  useEffect(() => {
    let stale = false;
    readAll(runId, seq)
      .then(async (ev) => {
        const c = await verifyLedger(runId, ev);
        if (stale) return;
        setEvents(ev);
        setCheck(c);
      })
      .catch((e: unknown) => !stale && setError(e instanceof Error ? e.message : String(e)));
    return () => {
      stale = true;
    };
  }, [runId, seq]);

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
