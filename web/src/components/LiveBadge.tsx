import type { StreamState } from '../stream';

const TEXT: Record<StreamState, string> = {
  connecting: 'Connecting…',
  live: 'Live',
  offline: 'Offline: reconnecting',
};

/** Whether the page is receiving live updates; announced politely when it changes. */
export function LiveBadge({ state }: { state: StreamState }) {
  return (
    <span class={`live live-${state}`} role="status" aria-live="polite" data-testid="live-state">
      {TEXT[state]}
    </span>
  );
}
