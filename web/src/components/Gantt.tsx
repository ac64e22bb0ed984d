import { useState } from 'preact/hooks';
import type { RunAttempt } from '../api';

const ROW_H = 20;
const BAR_H = 12;
const LABEL_W = 180;
const AXIS_H = 24;
const PLOT_W = 720;

/** An attempt's two phases in ms since the run started: waiting in the queue, then executing. */
export interface Phases {
  stepId: string;
  attempt: number;
  status: string;
  /** Ready (queued) to claimed by a worker, or to started when the attempt says when. */
  wait: [number, number] | null;
  /** Started (or claimed) to finished, ended, or now while it runs. */
  run: [number, number];
}

const ms = (iso: string | null) => (iso ? Date.parse(iso) : null);

export function phases(a: RunAttempt, origin: number, now: number): Phases {
  const claimed = Date.parse(a.claimedUtc);
  const started = ms(a.startedUtc) ?? claimed;
  const queued = ms(a.queuedUtc);
  const end = ms(a.finishedUtc) ?? ms(a.terminatedUtc) ?? (a.status === 'running' ? now : started);
  return {
    stepId: a.stepId,
    attempt: a.attempt,
    status: a.status,
    wait: queued !== null && queued < started ? [queued - origin, started - origin] : null,
    run: [started - origin, Math.max(started, end) - origin],
  };
}

/** A duration in ms as a short text: 850 ms, 1.25 s, 2 min 5 s. */
export function span(d: number): string {
  if (d < 1000) return `${String(Math.round(d))} ms`;
  if (d < 60_000) return `${(d / 1000).toFixed(d < 10_000 ? 2 : 1)} s`;
  const m = Math.floor(d / 60_000);
  return `${String(m)} min ${String(Math.round((d - m * 60_000) / 1000))} s`;
}

/** Ticks 1, 2 or 5 times a power of ten apart, about six across `total` ms. */
function ticks(total: number): number[] {
  const raw = Math.max(total, 1) / 6;
  const pow = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((k) => k * pow).find((s) => s >= raw) ?? raw;
  const out: number[] = [];
  for (let t = 0; t <= total + step / 2; t += step) out.push(t);
  return out;
}

/**
 * The run's attempts on a time axis from the run's start: one row per step (its attempts as bars
 * side by side), queue wait hatched and execution solid in the attempt's state colour. A step in
 * `awaiting` (an approval or signal step) does nothing but wait for a decision or a signal once it
 * starts: its started-to-end span is drawn outlined and named so, not as execution. The same
 * timings are offered as a table for screen readers and for reading exact values.
 */
export function Gantt(props: {
  startedUtc: string;
  steps: string[];
  attempts: RunAttempt[];
  now: number;
  awaiting?: ReadonlySet<string>;
}) {
  const awaiting = props.awaiting ?? new Set<string>();
  const [asTable, setAsTable] = useState(false);
  const origin = Date.parse(props.startedUtc);
  const byStep = new Map<string, Phases[]>();
  for (const a of props.attempts) {
    const p = phases(a, origin, props.now);
    const list = byStep.get(a.stepId);
    if (list) list.push(p);
    else byStep.set(a.stepId, [p]);
  }
  let total = 1;
  for (const list of byStep.values()) for (const p of list) total = Math.max(total, p.run[1]);
  const scale = PLOT_W / total;
  const x = (t: number) => LABEL_W + t * scale;
  const rows = props.steps;
  const height = AXIS_H + rows.length * ROW_H;
  const all = [...byStep.values()].flat();

  return (
    <div class="gantt" data-testid="gantt">
      <p class="muted legend">
        <span class="swatch wait" aria-hidden="true" /> queue wait (ready → started){' '}
        <span class="swatch exec" aria-hidden="true" /> execution
        {rows.some((id) => awaiting.has(id)) && (
          <>
            {' '}
            <span class="swatch awaiting" aria-hidden="true" /> waiting for a decision or signal
          </>
        )}
        ; {all.length} attempts over {span(total)}
      </p>
      <div class="gantt-scroll" tabIndex={0} role="region" aria-label="Timeline of the attempts">
        <svg
          role="img"
          aria-label={`Gantt of ${String(all.length)} attempts of ${String(rows.length)} steps over ${span(total)}; the table below has the same timings`}
          width={LABEL_W + PLOT_W + 16}
          height={height}
          viewBox={`0 0 ${String(LABEL_W + PLOT_W + 16)} ${String(height)}`}
        >
          <defs>
            <pattern id="gantt-hatch" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)">
              <rect width="6" height="6" class="hatch-bg" />
              <line x1="0" y1="0" x2="0" y2="6" class="hatch" />
            </pattern>
          </defs>
          {ticks(total).map((t) => (
            <g key={t} class="tick">
              <line x1={x(t)} x2={x(t)} y1={AXIS_H - 4} y2={height} />
              <text x={x(t)} y={AXIS_H - 8} text-anchor="middle">
                {t === 0 ? '0' : span(t)}
              </text>
            </g>
          ))}
          {rows.map((stepId, i) => {
            const y = AXIS_H + i * ROW_H;
            return (
              <g key={stepId} data-gantt-step={stepId}>
                <text x={LABEL_W - 8} y={y + ROW_H / 2} dy="0.35em" text-anchor="end" class="label">
                  {stepId.length > 24 ? `${stepId.slice(0, 23)}…` : stepId}
                </text>
                {(byStep.get(stepId) ?? []).map((p) => (
                  <g key={p.attempt} data-attempt={p.attempt}>
                    {p.wait && (
                      <rect
                        class="wait"
                        x={x(p.wait[0])}
                        y={y + (ROW_H - BAR_H) / 2}
                        width={Math.max(1, (p.wait[1] - p.wait[0]) * scale)}
                        height={BAR_H}
                      />
                    )}
                    <rect
                      class={`exec s-${p.status}${awaiting.has(stepId) ? ' awaiting' : ''}`}
                      x={x(p.run[0])}
                      y={y + (ROW_H - BAR_H) / 2}
                      width={Math.max(2, (p.run[1] - p.run[0]) * scale)}
                      height={BAR_H}
                    />
                  </g>
                ))}
              </g>
            );
          })}
        </svg>
      </div>
      <details onToggle={(e) => setAsTable(e.currentTarget.open)}>
        <summary>Timings as a table</summary>
        {asTable && (
          <table data-testid="gantt-table">
            <thead>
              <tr>
                <th scope="col">Step</th>
                <th scope="col">Attempt</th>
                <th scope="col">Status</th>
                <th scope="col">Ready at</th>
                <th scope="col">Queue wait</th>
                <th scope="col">Started at</th>
                <th scope="col">Execution (or waiting for a decision or signal)</th>
              </tr>
            </thead>
            <tbody>
              {rows.flatMap((stepId) =>
                (byStep.get(stepId) ?? []).map((p) => (
                  <tr key={`${stepId}#${String(p.attempt)}`}>
                    <td>{stepId}</td>
                    <td>{p.attempt}</td>
                    <td>{p.status}</td>
                    <td>{p.wait ? `+${span(p.wait[0])}` : ''}</td>
                    <td>{p.wait ? span(p.wait[1] - p.wait[0]) : '—'}</td>
                    <td>+{span(p.run[0])}</td>
                    <td>
                      {span(p.run[1] - p.run[0])}
                      {awaiting.has(stepId) ? ' waiting' : ''}
                    </td>
                  </tr>
                )),
              )}
            </tbody>
          </table>
        )}
      </details>
    </div>
  );
}
