import { useEffect, useRef, useState } from 'preact/hooks';
import {
  api,
  ApiError,
  canWrite,
  flowApi,
  type Attempt,
  type RunAttempt,
  type RunDetail,
  type Session,
  type Step,
} from '../api';
import { Gantt } from '../components/Gantt';
import { Graph } from '../components/Graph';
import { Ledger } from '../components/Ledger';
import { StepActions } from '../components/StepActions';
import { LiveBadge } from '../components/LiveBadge';
import { Link } from '../components/Link';
import { duration, Status, time } from '../components/Status';
import { navigate } from '../router';
import { LiveStream, type StreamEvent, type StreamState } from '../stream';

const FINAL = new Set(['succeeded', 'failed', 'cancelled']);
/** Plugins whose steps, once started, wait for a decision or a signal from outside the engine. */
const WAITS = new Set(['approval', 'signal']);

function describe(e: unknown): string {
  return e instanceof ApiError ? `${e.message} (${e.code})` : e instanceof Error ? e.message : String(e);
}

/**
 * One run: its graph and steps, kept current from the stream. The run read from the API carries
 * lastEventSeq; an event of the run with a seq at or below the newest one applied is already in
 * what the page shows and is ignored, so a read and the stream can overlap without going back.
 */
export function RunPage({ runId, session }: { runId: string; session: Session }) {
  const [run, setRun] = useState<RunDetail | null>(null);
  const [missing, setMissing] = useState<string | null>(null);
  const [live, setLive] = useState<StreamState>('connecting');
  const [selected, setSelected] = useState<string | null>(null);
  const [notice, setNotice] = useState<string | null>(null);
  const applied = useRef(0);

  // Every attempt of the run, for the Gantt: read beside the run, each time the run is read.
  const [attempts, setAttempts] = useState<RunAttempt[] | null>(null);

  // Reads the run; a newer read replaces older state, events then apply on top.
  const refresh = useRef<() => void>(() => undefined);
  useEffect(() => {
    let stale = false;
    let pending: ReturnType<typeof setTimeout> | undefined;
    // Attempts of a read answered after those of a later read are older: they are dropped.
    let reads = 0;
    let shownRead = 0;
    const read = () => {
      const n = ++reads;
      flowApi.runAttempts(runId).then(
        (a) => {
          if (stale || n < shownRead) return;
          shownRead = n;
          setAttempts(a.items);
        },
        (e: unknown) => !stale && setNotice(describe(e)),
      );
      api.getRun(runId).then(
        (r) => {
          if (stale || r.lastEventSeq < applied.current) return;
          applied.current = r.lastEventSeq;
          setRun(r);
          setSelected((s) => s ?? r.steps.find((x) => x.status === 'failed')?.stepId ?? null);
        },
        (e: unknown) => {
          if (stale) return;
          if (e instanceof ApiError && e.status === 404) setMissing(describe(e));
          else setNotice(describe(e));
        },
      );
    };
    refresh.current = () => {
      // Outputs, attempts and timings are not in the events: they are read again after a burst.
      pending ??= setTimeout(() => {
        pending = undefined;
        read();
      }, 250);
    };
    read();
    return () => {
      stale = true;
      clearTimeout(pending);
    };
  }, [runId]);

  const loaded = run !== null;
  useEffect(() => {
    if (!loaded) return;
    const onEvent = (e: StreamEvent) => {
      if (e.runId !== runId || e.seq <= applied.current) return;
      applied.current = e.seq;
      setRun((r) => {
        if (!r) return r;
        if (e.event === 'step.updated' && e.stepId) {
          return {
            ...r,
            steps: r.steps.map((s) => (s.stepId === e.stepId ? { ...s, status: e.status as Step['status'] } : s)),
          };
        }
        return { ...r, status: e.status as RunDetail['status'], lastEventSeq: e.seq };
      });
      refresh.current();
    };
    const stream = new LiveStream({
      filter: { runId },
      onEvent,
      onState: setLive,
      onSubscribed: () => refresh.current(),
    });
    return () => stream.close();
  }, [runId, loaded]);

  if (missing) {
    return (
      <>
        <h1>Run not found</h1>
        <p role="alert">
          {missing}. <Link href="/runs">All runs</Link>
        </p>
      </>
    );
  }
  if (!run) return <p class="muted">{notice ?? 'Loading the run…'}</p>;

  const writable = canWrite(session);
  const cancel = async () => {
    try {
      await api.cancelRun(runId);
      setNotice('Cancellation requested.');
      refresh.current();
    } catch (e) {
      setNotice(describe(e));
    }
  };
  const replay = async () => {
    try {
      const r = await flowApi.replay(runId);
      navigate(`/runs/${r.runId}`);
    } catch (e) {
      setNotice(describe(e));
    }
  };
  const rerun = async (stepId: string) => {
    try {
      const r = await api.rerunRun(runId, stepId);
      navigate(`/runs/${r.runId}`);
    } catch (e) {
      setNotice(describe(e));
    }
  };

  const edges = run.steps.flatMap((s) => s.dependsOn.map((from) => ({ from, to: s.stepId })));
  const step = run.steps.find((s) => s.stepId === selected) ?? null;
  const steps = [...run.steps].sort((a, b) => a.topoIndex - b.topoIndex);

  return (
    <>
      <div class="title">
        <h1>
          Run <span class="mono">{run.runId}</span>
        </h1>
        <LiveBadge state={live} />
      </div>
      <dl class="facts">
        <dt>DAG</dt>
        <dd>
          <Link href={`/dags/${encodeURIComponent(run.dagId)}/versions/${String(run.version)}`}>
            {run.dagId} v{run.version}
          </Link>
        </dd>
        <dt>Status</dt>
        <dd data-testid="run-status">
          <Status status={run.status} />
          {run.reason && <span class="muted"> {run.reason}</span>}
        </dd>
        <dt>Inputs hash</dt>
        <dd class="mono hash" data-testid="inputs-hash">
          {run.inputsHash}
        </dd>
        <dt>Outputs hash</dt>
        <dd class="mono hash">{run.outputsHash ?? '—'}</dd>
        <dt>Started</dt>
        <dd>{time(run.startedUtc)}</dd>
        <dt>Duration</dt>
        <dd>{duration(run.startedUtc, run.finishedUtc)}</dd>
        {run.replayOf && (
          <>
            <dt>Replay of</dt>
            <dd>
              <Link href={`/runs/${run.replayOf}`} class="mono">
                {run.replayOf.slice(0, 8)}
              </Link>
            </dd>
          </>
        )}
        {run.rerunOf && (
          <>
            <dt>Rerun of</dt>
            <dd>
              <Link href={`/runs/${run.rerunOf}`} class="mono">
                {run.rerunOf.slice(0, 8)}
              </Link>{' '}
              from {run.rerunFromStep}
            </dd>
          </>
        )}
      </dl>
      {writable && (
        <div class="actions">
          {!FINAL.has(run.status) && (
            <button type="button" class="danger" onClick={() => void cancel()}>
              Cancel run
            </button>
          )}
          <button type="button" onClick={() => void replay()}>
            Replay run
          </button>
        </div>
      )}
      {notice && (
        <p role="alert" class="notice">
          {notice}
        </p>
      )}
      <section aria-labelledby="graph-h">
        <h2 id="graph-h">Graph</h2>
        <Graph
          label={`Steps of run ${run.runId}`}
          nodes={run.steps.map((s) => ({ id: s.stepId, state: s.status }))}
          edges={edges}
          selected={selected}
          onSelect={setSelected}
        />
      </section>
      <section aria-labelledby="gantt-h">
        <h2 id="gantt-h">Timeline</h2>
        {attempts ? (
          <Gantt
            startedUtc={run.startedUtc}
            steps={steps.map((s) => s.stepId)}
            attempts={attempts}
            now={Date.now()}
            awaiting={new Set(steps.filter((s) => WAITS.has(s.plugin)).map((s) => s.stepId))}
          />
        ) : (
          <p class="muted">Reading the attempts…</p>
        )}
      </section>
      <section aria-labelledby="steps-h">
        <h2 id="steps-h">Steps</h2>
        <table class="steps">
          <thead>
            <tr>
              <th scope="col">Step</th>
              <th scope="col">Status</th>
              <th scope="col">Plugin</th>
              <th scope="col">Attempts</th>
              <th scope="col">Duration</th>
              <th scope="col">Outputs hash</th>
            </tr>
          </thead>
          <tbody>
            {steps.map((s) => (
              <tr key={s.stepId} data-step={s.stepId} class={s.stepId === selected ? 'selected' : ''}>
                <td>
                  <button
                    type="button"
                    class="link"
                    aria-pressed={s.stepId === selected}
                    onClick={() => setSelected(s.stepId)}
                  >
                    {s.stepId}
                  </button>
                </td>
                <td>
                  <Status status={s.status} />
                  {s.fromRerun && <span class="muted"> reused</span>}
                </td>
                <td>{s.plugin}</td>
                <td>{s.attempts}</td>
                <td>{duration(s.startedUtc, s.finishedUtc)}</td>
                <td>
                  {s.outputsHash && (
                    <code class="hash" title={s.outputsHash}>
                      {s.outputsHash.slice(0, 12)}
                    </code>
                  )}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      </section>
      {step && (
        <StepDetail
          key={step.stepId}
          runId={runId}
          step={step}
          canRerun={writable && run.status === 'failed'}
          canAct={writable}
          onRerun={(id) => void rerun(id)}
          onActed={(message) => {
            setNotice(message);
            refresh.current();
          }}
        />
      )}
      <section aria-labelledby="inputs-h">
        <h2 id="inputs-h">Inputs</h2>
        <pre class="code" tabIndex={0} aria-label={`Inputs of run ${run.runId}`} data-testid="run-inputs">
          {JSON.stringify(run.inputs, null, 2)}
        </pre>
      </section>
      <section aria-labelledby="ledger-h">
        <h2 id="ledger-h">Ledger</h2>
        <Ledger runId={runId} seq={run.lastEventSeq} />
      </section>
    </>
  );
}

function StepDetail(props: {
  runId: string;
  step: Step;
  canRerun: boolean;
  canAct: boolean;
  onRerun: (stepId: string) => void;
  onActed: (message: string) => void;
}) {
  const { runId, step } = props;
  const [attempts, setAttempts] = useState<Attempt[] | null>(null);
  const [logs, setLogs] = useState<string | null>(null);
  const [error, setError] = useState<string | null>(null);

  useEffect(() => {
    let stale = false;
    api.attempts(runId, step.stepId).then(
      (a) => !stale && setAttempts(a.items),
      (e: unknown) => !stale && setError(describe(e)),
    );
    return () => {
      stale = true;
    };
  }, [runId, step.stepId, step.status, step.attempts]);

  // A failed attempt's logs are kept on the attempt, a success's on the step too: the latest
  // attempt that has logs is shown.
  const withLogs = attempts?.filter((a) => a.logsHash).at(-1);
  const logsHash = withLogs?.logsHash ?? step.logsHash;
  useEffect(() => {
    let stale = false;
    setLogs(null);
    if (logsHash) {
      api.artifactText(logsHash).then(
        (t) => !stale && setLogs(formatLogs(t)),
        (e: unknown) => !stale && setError(describe(e)),
      );
    }
    return () => {
      stale = true;
    };
  }, [logsHash]);

  return (
    <section aria-labelledby="step-h" class="step-detail" data-testid="step-detail">
      <h2 id="step-h">
        Step <span class="mono">{step.stepId}</span> <Status status={step.status} />
      </h2>
      {props.canRerun && (
        <div class="actions">
          <button type="button" onClick={() => props.onRerun(step.stepId)}>
            Rerun from {step.stepId}
          </button>
        </div>
      )}
      {props.canAct && step.status === 'waiting' && <StepActions runId={runId} step={step} onActed={props.onActed} />}
      {error && <p class="error">{error}</p>}
      {step.error != null && (
        <>
          <h3>Error</h3>
          <pre class="code" data-testid="step-error">
            {JSON.stringify(step.error, null, 2)}
          </pre>
        </>
      )}
      <h3>Logs{withLogs ? ` (attempt ${String(withLogs.attempt)})` : ''}</h3>
      {logsHash ? (
        <pre class="code logs" data-testid="step-logs" tabIndex={0} aria-label={`Logs of ${step.stepId}`}>
          {logs ?? 'Loading…'}
        </pre>
      ) : (
        <p class="muted">No logs.</p>
      )}
      <h3>Outputs</h3>
      {step.outputsHash && (
        <p>
          SHA-256 of the outputs (canonical JSON):{' '}
          <code class="hash" data-testid="outputs-hash">
            {step.outputsHash}
          </code>
        </p>
      )}
      {step.outputs != null ? (
        <pre class="code" tabIndex={0} aria-label={`Outputs of ${step.stepId}`}>
          {JSON.stringify(step.outputs, null, 2)}
        </pre>
      ) : (
        <p class="muted">{step.outputsHash ? 'Stored as an artifact by that hash.' : 'None.'}</p>
      )}
      <h3>Attempts</h3>
      {attempts && attempts.length > 0 ? (
        <table>
          <thead>
            <tr>
              <th scope="col">#</th>
              <th scope="col">Status</th>
              <th scope="col">Claimed</th>
              <th scope="col">Duration</th>
              <th scope="col">Error</th>
              <th scope="col">Outputs hash</th>
            </tr>
          </thead>
          <tbody>
            {attempts.map((a) => (
              <tr key={a.attempt}>
                <td>{a.attempt}</td>
                <td>
                  <Status status={a.status} />
                </td>
                <td>{time(a.claimedUtc)}</td>
                <td>{duration(a.startedUtc, a.finishedUtc)}</td>
                <td>{a.error == null ? '' : ((a.error as { code?: string }).code ?? 'error')}</td>
                <td>
                  {a.outputsHash && (
                    <code class="hash" title={a.outputsHash}>
                      {a.outputsHash.slice(0, 12)}
                    </code>
                  )}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      ) : (
        <p class="muted">{attempts ? 'No attempts yet.' : 'Loading…'}</p>
      )}
    </section>
  );
}

/** A step's log artifact (a JSON array of {ts, level, message}) as one line per entry. */
function formatLogs(text: string): string {
  try {
    const lines = JSON.parse(text) as { ts?: string; level?: string; message?: string }[];
    if (!Array.isArray(lines)) return text;
    return lines.map((l) => `${l.ts ?? ''} ${(l.level ?? '').padEnd(5)} ${l.message ?? ''}`).join('\n');
  } catch {
    return text;
  }
}
