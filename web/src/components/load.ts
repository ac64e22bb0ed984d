import { useEffect, useState } from 'preact/hooks';
import { ApiError } from '../api';

/** An API refusal as one readable line: the envelope's message and its stable code. */
export function describe(e: unknown): string {
  return e instanceof ApiError ? `${e.message} (${e.code})` : String(e);
}

export interface Loaded<T> {
  data: T | null;
  error: string | null;
  /** Reads again (after an action changed what the page shows). */
  reload: () => void;
}

/** Loads once per change of `deps`; an answer that arrives after the deps changed is dropped. */
export function useLoad<T>(load: () => Promise<T>, deps: unknown[]): Loaded<T> {
  const [state, setState] = useState<{ data: T | null; error: string | null }>({ data: null, error: null });
  const [round, setRound] = useState(0);
  useEffect(() => {
    let stale = false;
    load().then(
      (data) => !stale && setState({ data, error: null }),
      (e: unknown) => !stale && setState({ data: null, error: describe(e) }),
    );
    return () => {
      stale = true;
    };
    // The caller names what the load depends on.
  }, [...deps, round]);
  return { ...state, reload: () => setRound((n) => n + 1) };
}
