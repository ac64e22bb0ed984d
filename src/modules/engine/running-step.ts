import type { ClaimedWork } from './engine.store';

/** Why a running step was stopped before its plugin finished. */
export type StopReason =
  | 'cancelled'
  | 'timeout'
  | 'max_allowed_run_time'
  /** maxExpectedRunTime passed with a `fail` or `skip` action. */
  | 'max_expected_run_time'
  | 'lease_lost'
  | 'shutdown'
  | 'superseded';

/** A step this worker runs: its work, its abort signal, and why it was stopped (null while it was not). */
export interface RunningStep {
  work: ClaimedWork;
  ac: AbortController;
  reason: StopReason | null;
  /** The chain's step running after this one (see ChainRunner): stopped with it. */
  link?: RunningStep;
  /** Settles the plugin call under way as aborted (set while one is). */
  aborted?: () => void;
}

export function runningStep(work: ClaimedWork): RunningStep {
  return { work, ac: new AbortController(), reason: null };
}

/** Stops `r` (and the chain step running after it) for `reason`; the first reason stays. */
export function stopStep(r: RunningStep, reason: StopReason): void {
  if (r.link) stopStep(r.link, reason);
  if (r.reason) return;
  r.reason = reason;
  r.ac.abort(reason);
  r.aborted?.();
}

/** The key of a step in the worker's tables: tenant, run and step id. */
export const stepKey = (w: { tenantId: string; runId: string; stepId: string }): string =>
  `${w.tenantId}/${w.runId}/${w.stepId}`;
