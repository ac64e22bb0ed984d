// History-API routing for the console's paths (the server answers each of them with index.html).
import { useEffect, useState } from 'preact/hooks';

export interface Location {
  path: string;
  query: URLSearchParams;
}

const listeners = new Set<() => void>();

function read(): Location {
  return { path: location.pathname, query: new URLSearchParams(location.search) };
}

export function navigate(to: string, opts: { replace?: boolean } = {}): void {
  if (opts.replace) history.replaceState(null, '', to);
  else history.pushState(null, '', to);
  for (const fn of listeners) fn();
}

window.addEventListener('popstate', () => {
  for (const fn of listeners) fn();
});

export function useLocation(): Location {
  const [loc, setLoc] = useState(read);
  useEffect(() => {
    const fn = () => setLoc(read());
    listeners.add(fn);
    return () => void listeners.delete(fn);
  }, []);
  return loc;
}

/** Matches `/runs/:runId` style patterns; returns the decoded parameters or null. */
export function match(pattern: string, path: string): Record<string, string> | null {
  const p = pattern.split('/');
  const s = path.replace(/\/+$/, '').split('/');
  if (p.length !== s.length) return null;
  const out: Record<string, string> = {};
  for (let i = 0; i < p.length; i++) {
    if (p[i].startsWith(':')) out[p[i].slice(1)] = decodeURIComponent(s[i]);
    else if (p[i] !== s[i]) return null;
  }
  return out;
}
