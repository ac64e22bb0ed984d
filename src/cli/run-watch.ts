import WebSocket from 'ws';
import { toOrdoApiError, unwrap, type OrdoClient, type Schemas } from '../../sdk/client/src';
import type { CliIo } from './command';
import type { Output } from './api';

type RunDetail = Schemas['RunDetail'];

/** Exit codes of `ordo runs watch` (and of `start`/`rerun` with --watch): the run's outcome. */
export const RUN_EXIT = {
  succeeded: 0,
  failed: 3,
  cancelled: 4,
  /** --timeout elapsed before the run ended (the run goes on). */
  timedOut: 5,
} as const;

const FINAL = new Set(['succeeded', 'failed', 'cancelled']);
const FINAL_EVENTS = new Set(['run.completed', 'run.failed', 'run.cancelled']);
/** Close codes after which a reconnect would be refused the same way (bad token, scope, auth message). */
const FATAL_CLOSE = new Set([4001, 4003, 4400, 4408]);
const SUBSCRIPTION = 'watch';

interface StreamEvent {
  type: 'event';
  cursor: string;
  event: string;
  eventType: string;
  runId: string;
  seq: number;
  stepId: string | null;
  attempt: number | null;
  status: string | null;
  timestamp: string;
}

type ServerMessage =
  | StreamEvent
  | { type: 'ready' | 'subscribed'; cursor: string }
  | { type: 'error'; code: string; message: string }
  | { type: 'unsubscribed' | 'pong' };

export interface WatchOptions {
  output: Output;
  /** Give up after this many ms (exit RUN_EXIT.timedOut); none: wait for the run's end. */
  timeoutMs?: number;
}

/**
 * Follows a run over the stream (`/api/v1/stream`, subscription filtered by runId) until it ends,
 * printing its progress, and returns the exit code of its outcome. The run is read once the
 * subscription is active, so an end that came before it is seen there and one after it arrives as
 * an event. A dropped connection is reopened with `since` = the last cursor held, so no event is
 * missed; refusals (token, scope, tenant) end the watch with their error.
 */
export async function watchRun(client: OrdoClient, runId: string, io: CliIo, opts: WatchOptions): Promise<number> {
  const getRun = () => unwrap(client.api.GET('/api/v1/runs/{runId}', { params: { path: { runId } } }));
  const first = await getRun();
  if (opts.output === 'table') {
    io.err(`watching run ${runId} (${first.dagId} v${first.version}): ${first.status}\n`);
  }
  // Progress is printed once per event, in seq order: the run's ledger up to now, then what the
  // stream brings; a gap in seq (events before the subscription, or missed) is read from the ledger.
  let printedSeq = 0;
  const backfill = async () => {
    for (;;) {
      const page = await unwrap(
        client.api.GET('/api/v1/runs/{runId}/events', {
          params: { path: { runId }, query: { after: printedSeq, limit: 1000 } },
        }),
      );
      for (const e of page.items) {
        printProgress(io, fromLedger(runId, e), opts.output);
        printedSeq = e.seq;
      }
      if (page.nextAfter === null || page.items.length === 0) return;
    }
  };
  if (FINAL.has(first.status)) {
    await backfill();
    return finish(first, io, opts.output);
  }

  // Messages are handled one after the other, each after the previous one's reads.
  let chain: Promise<void> = Promise.resolve();
  const handle = (task: () => Promise<void>) => {
    chain = chain.then(task).catch(fail);
  };
  let cursor: string | undefined;
  let ended: RunDetail | undefined;
  let failure: Error | undefined;
  const failedSoFar = (): Error | undefined => failure;
  const fail = (e: unknown) => {
    // The API unreachable for a read (fetch's network errors are TypeErrors, by name: they may come
    // from another realm's constructor): this connection ends and the watch resumes from its
    // cursor, as after a dropped stream.
    if ((e as Error | undefined)?.name === 'TypeError' && !failure) {
      socket?.terminate();
      return;
    }
    failure = e instanceof Error ? e : new Error(String(e));
    wake();
  };
  let socket: WebSocket | undefined;
  let wake: () => void = () => undefined;
  const deadline = opts.timeoutMs === undefined ? undefined : Date.now() + opts.timeoutMs;
  const timer =
    opts.timeoutMs === undefined
      ? undefined
      : setTimeout(() => {
          wake();
        }, opts.timeoutMs);

  /** One connection: resolves when it closes (or the watch has its answer). */
  const connectOnce = () =>
    new Promise<void>((resolve) => {
      wake = () => {
        socket?.terminate();
        resolve();
      };
      // The address that answered last, so a watch follows the client past an unreachable replica.
      const base = client.baseUrl.replace(/^http/, 'ws');
      const url = `${base}/api/v1/stream${cursor ? `?since=${encodeURIComponent(cursor)}` : ''}`;
      const headers: Record<string, string> = {};
      if (client.token) headers.authorization = `Bearer ${client.token}`;
      if (client.tenantId) headers['x-tenant-id'] = client.tenantId;
      const ws = new WebSocket(url, { headers });
      socket = ws;
      ws.on('unexpected-response', (_req, res) => {
        let text = '';
        res.on('data', (d: Buffer) => (text += d.toString('utf8')));
        res.on('end', () => {
          let body: unknown = text;
          try {
            body = JSON.parse(text);
          } catch {
            // not JSON: the text is the message
          }
          failure = toOrdoApiError(res.statusCode ?? 0, body);
          ws.terminate();
          resolve();
        });
      });
      ws.on('open', () => {
        ws.send(JSON.stringify({ type: 'subscribe', id: SUBSCRIPTION, filter: { runId } }));
      });
      ws.on('message', (data: Buffer) => {
        const msg = JSON.parse(data.toString('utf8')) as ServerMessage;
        switch (msg.type) {
          case 'subscribed':
            cursor ??= msg.cursor;
            // What happened before the subscription is in the ledger and in the run as read now.
            handle(async () => {
              await backfill();
              const run = await getRun();
              if (FINAL.has(run.status) && !ended) {
                ended = run;
                wake();
              }
            });
            return;
          case 'event':
            cursor = msg.cursor;
            handle(async () => {
              if (msg.seq === printedSeq + 1) {
                printProgress(io, fromStream(msg), opts.output);
                printedSeq = msg.seq;
              } else if (msg.seq > printedSeq) await backfill();
              if (FINAL_EVENTS.has(msg.event) && !ended) {
                ended = await getRun();
                wake();
              }
            });
            return;
          case 'error':
            failure = new Error(`stream: ${msg.message} (${msg.code})`);
            wake();
            return;
          case 'ready':
          case 'unsubscribed':
          case 'pong':
            return;
        }
      });
      ws.on('close', (code: number, reason: Buffer) => {
        if (FATAL_CLOSE.has(code) && !failure) {
          failure = new Error(`stream closed: ${reason.toString('utf8') || 'refused'} (close code ${code})`);
        }
        resolve();
      });
      ws.on('error', () => {
        // A connection that fails also closes; the close decides what happens next.
      });
    });

  const timedOut = () => {
    if (opts.output === 'table') io.err(`run ${runId} has not ended within --timeout; it goes on\n`);
    else io.out(`${JSON.stringify({ type: 'timeout', runId })}\n`);
    return RUN_EXIT.timedOut;
  };
  const late = () => deadline !== undefined && Date.now() >= deadline;
  try {
    for (let retry = 0; ; retry++) {
      await connectOnce();
      if (failure) throw failure;
      if (ended) {
        // The run's end is printed last: the messages already received are handled, then whatever
        // of its ledger is not printed yet (an end seen in the run record can precede its events).
        socket?.terminate();
        await chain;
        // (A handled message may have failed meanwhile.)
        const failed = failedSoFar();
        if (failed) throw failed;
        await backfill();
        return finish(ended, io, opts.output);
      }
      if (late()) return timedOut();
      // The connection dropped: reopen from the last cursor after a short, growing pause.
      const pause = Math.min(5000, 250 * 2 ** Math.min(retry, 5));
      // On stderr whatever the output: stdout keeps to progress (and JSON lines with -o json).
      io.err(`stream disconnected; resuming in ${pause} ms\n`);
      await new Promise<void>((r) => {
        const t = setTimeout(r, pause);
        wake = () => {
          clearTimeout(t);
          r();
        };
      });
      if (late()) return timedOut();
    }
  } finally {
    if (timer) clearTimeout(timer);
    socket?.terminate();
  }
}

/** One line of progress: an event of the run, from the stream or from its ledger. */
interface Progress {
  type: 'event';
  runId: string;
  seq: number;
  eventType: string;
  stepId: string | null;
  attempt: number | null;
  status: string | null;
  timestamp: string;
}

function fromStream(e: StreamEvent): Progress {
  const { runId, seq, eventType, stepId, attempt, status, timestamp } = e;
  return { type: 'event', runId, seq, eventType, stepId, attempt, status, timestamp };
}

/** A ledger event in the stream's terms: the status it records, else the one its type names. */
function fromLedger(runId: string, e: Schemas['RunEvent']): Progress {
  const data = e.data && typeof e.data === 'object' ? (e.data as { status?: unknown }) : {};
  const suffix = e.type.slice(e.type.indexOf('.') + 1);
  const named = suffix === 'started' ? 'running' : suffix === 'completed' ? 'succeeded' : suffix;
  const status = typeof data.status === 'string' ? data.status : e.type === 'run.created' ? 'queued' : named;
  return {
    type: 'event',
    runId,
    seq: e.seq,
    eventType: e.type,
    stepId: e.stepId,
    attempt: e.attempt,
    status,
    timestamp: e.createdUtc,
  };
}

function printProgress(io: CliIo, p: Progress, output: Output): void {
  if (output === 'json') {
    io.out(`${JSON.stringify(p)}\n`);
    return;
  }
  const time = p.timestamp.slice(11, 23);
  const what = p.stepId ? `step ${p.stepId}${p.attempt ? ` (attempt ${p.attempt})` : ''}` : 'run';
  io.out(`${time}  ${what}: ${p.status ?? p.eventType}  [${p.eventType}]\n`);
}

/** Prints the run's end and returns its exit code. */
function finish(run: RunDetail, io: CliIo, output: Output): number {
  if (output === 'json') io.out(`${JSON.stringify({ type: 'run', run })}\n`);
  else {
    const took =
      run.finishedUtc && run.startedUtc
        ? ` in ${((Date.parse(run.finishedUtc) - Date.parse(run.startedUtc)) / 1000).toFixed(1)} s`
        : '';
    io.out(`run ${run.runId} ${run.status}${took}${run.reason ? ` (${run.reason})` : ''}\n`);
    for (const s of run.steps.filter((x) => x.status === 'failed')) {
      const err = s.error as { code?: string; message?: string } | null;
      io.out(`  step ${s.stepId} failed${err?.code ? `: ${err.code}` : ''}${err?.message ? ` ${err.message}` : ''}\n`);
    }
  }
  switch (run.status) {
    case 'succeeded':
      return RUN_EXIT.succeeded;
    case 'cancelled':
      return RUN_EXIT.cancelled;
    default:
      return RUN_EXIT.failed;
  }
}
