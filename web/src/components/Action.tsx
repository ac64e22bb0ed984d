import { useState } from 'preact/hooks';
import { describe } from './load';

interface Props {
  label: string;
  /** Asked before an action that cannot be undone; absent: the first click acts. */
  confirm?: string;
  danger?: boolean;
  run: () => Promise<unknown>;
  onDone: () => void;
}

/**
 * A button that calls the API once, says so while it waits, and shows the API's refusal beside it.
 * With `confirm`, the first press asks in place (no modal) and a second button confirms.
 */
export function Action({ label, confirm, danger, run, onDone }: Props) {
  const [phase, setPhase] = useState<'idle' | 'asking' | 'busy'>('idle');
  const [error, setError] = useState<string | null>(null);
  const act = async () => {
    setPhase('busy');
    setError(null);
    try {
      await run();
      setPhase('idle');
      onDone();
    } catch (e) {
      setPhase('idle');
      setError(describe(e));
    }
  };
  const cls = danger ? 'danger' : undefined;
  return (
    <span class="action">
      {phase === 'asking' ? (
        <span class="ask" role="group" aria-label={confirm}>
          <span>{confirm}</span>
          <button type="button" class={cls} onClick={() => void act()}>
            Yes, {label.toLowerCase()}
          </button>
          <button type="button" onClick={() => setPhase('idle')}>
            Keep
          </button>
        </span>
      ) : (
        <button
          type="button"
          class={cls}
          disabled={phase === 'busy'}
          onClick={() => (confirm ? setPhase('asking') : void act())}
        >
          {label}
        </button>
      )}
      {error && (
        <span role="alert" class="error">
          {error}
        </span>
      )}
    </span>
  );
}
