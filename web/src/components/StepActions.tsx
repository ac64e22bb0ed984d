import { useEffect, useState } from 'preact/hooks';
import { ApiError, flowApi, type Step, type StepExplanation } from '../api';

function describe(e: unknown): string {
  return e instanceof ApiError ? `${e.message} (${e.code})` : e instanceof Error ? e.message : String(e);
}

/**
 * What a person can do for a waiting step: decide an approval step, or post the signal a signal
 * step waits for (its name and correlation key as GET /runs/{runId}/explain gives them). Both go
 * through the API, which checks the scope and the step's state again.
 */
export function StepActions(props: { runId: string; step: Step; onActed: (message: string) => void }) {
  const { runId, step, onActed } = props;
  if (step.plugin === 'approval') return <Approval runId={runId} stepId={step.stepId} onActed={onActed} />;
  if (step.plugin === 'signal') return <Signal runId={runId} stepId={step.stepId} onActed={onActed} />;
  return null;
}

function Approval(props: { runId: string; stepId: string; onActed: (message: string) => void }) {
  const [comment, setComment] = useState('');
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  const decide = async (decision: 'approved' | 'rejected') => {
    setBusy(true);
    try {
      await flowApi.decide(props.runId, props.stepId, decision, comment.trim() || undefined);
      props.onActed(`${props.stepId}: ${decision}.`);
    } catch (e) {
      setError(describe(e));
    } finally {
      setBusy(false);
    }
  };
  return (
    <form class="step-action" aria-label={`Decide ${props.stepId}`} onSubmit={(e) => e.preventDefault()}>
      <label>
        Comment (optional)
        <input value={comment} maxLength={2000} onInput={(e) => setComment(e.currentTarget.value)} />
      </label>
      <div class="actions">
        <button type="button" disabled={busy} onClick={() => void decide('approved')}>
          Approve
        </button>
        <button type="button" class="danger" disabled={busy} onClick={() => void decide('rejected')}>
          Reject
        </button>
      </div>
      {error && (
        <p class="error" role="alert">
          {error}
        </p>
      )}
    </form>
  );
}

function Signal(props: { runId: string; stepId: string; onActed: (message: string) => void }) {
  const [wait, setWait] = useState<{ name: string; correlationKey: string } | null>(null);
  const [payload, setPayload] = useState('{}');
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);

  useEffect(() => {
    let stale = false;
    flowApi.explain(props.runId).then(
      (x) => {
        const s = x.steps.find(
          (e): e is Extract<StepExplanation, { reason: 'signal' }> =>
            e.stepId === props.stepId && e.reason === 'signal',
        );
        if (!stale && s?.name && s.correlationKey !== undefined)
          setWait({ name: s.name, correlationKey: s.correlationKey });
      },
      (e: unknown) => !stale && setError(describe(e)),
    );
    return () => {
      stale = true;
    };
  }, [props.runId, props.stepId]);

  if (!wait) return error ? <p class="error">{error}</p> : null;
  const send = async () => {
    let value: unknown;
    try {
      value = JSON.parse(payload);
    } catch {
      setError('The payload is not JSON.');
      return;
    }
    setBusy(true);
    try {
      const s = await flowApi.signal({ name: wait.name, correlationKey: wait.correlationKey, payload: value });
      props.onActed(`Signal ${s.signalId} ${s.status}.`);
    } catch (e) {
      setError(describe(e));
    } finally {
      setBusy(false);
    }
  };
  return (
    <form
      class="step-action"
      aria-label={`Send the signal ${props.stepId} waits for`}
      onSubmit={(e) => {
        e.preventDefault();
        void send();
      }}
    >
      <p>
        Waits for the signal <code>{wait.name}</code> with key <code>{wait.correlationKey}</code>.
      </p>
      <label>
        Payload (JSON)
        <textarea rows={3} value={payload} onInput={(e) => setPayload(e.currentTarget.value)} />
      </label>
      <div class="actions">
        <button type="submit" disabled={busy}>
          Send signal
        </button>
      </div>
      {error && (
        <p class="error" role="alert">
          {error}
        </p>
      )}
    </form>
  );
}
