/** A run or step state as a badge: the word is always shown, colour only repeats it. */
export function Status({ status }: { status: string }) {
  return <span class={`badge s-${status}`}>{status}</span>;
}

// What Date#toLocaleString(undefined, { hour12: false }) writes, with the format built once: that
// call builds its format again on each date, which shows on pages of hundreds of rows.
const LOCAL_TIME = new Intl.DateTimeFormat(undefined, {
  hour12: false,
  year: 'numeric',
  month: 'numeric',
  day: 'numeric',
  hour: 'numeric',
  minute: 'numeric',
  second: 'numeric',
});

export function time(iso: string | null): string {
  if (!iso) return '—';
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? 'Invalid Date' : LOCAL_TIME.format(d);
}

export function duration(from: string | null, to: string | null): string {
  if (!from) return '—';
  const ms = (to ? Date.parse(to) : Date.now()) - Date.parse(from);
  if (ms < 1000) return `${String(ms)} ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(1)} s`;
  return `${String(Math.floor(ms / 60_000))} min ${String(Math.round((ms % 60_000) / 1000))} s`;
}
