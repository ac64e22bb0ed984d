import { useEffect, useRef, useState } from 'preact/hooks';
import { api, ApiError, RUN_STATES, type Page, type Run, type RunStatusFilter } from '../api';
import { LiveBadge } from '../components/LiveBadge';
import { Link } from '../components/Link';
import { Status, time } from '../components/Status';
import { navigate } from '../router';
import { LiveStream, type StreamState } from '../stream';

/**
 * The tenant's runs, newest first, filtered by DAG and status, one keyset page at a time. Live: a
 * run event updates the row it names; on the first page, a run not listed yet reloads the page.
 */
export function RunsPage({ query }: { query: URLSearchParams }) {
  const dagId = query.get('dagId') ?? '';
  const status = query.get('status') ?? '';
  const pageToken = query.get('page') ?? '';
  const [page, setPage] = useState<Page<Run> | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [live, setLive] = useState<StreamState>('connecting');
  const [reloads, setReloads] = useState(0);
  const rows = useRef<Map<string, Run>>(new Map());

  useEffect(() => {
    let stale = false;
    // A status the API does not know is refused there (400), shown as the page's error.
    api.listRuns({ dagId, status: (status || undefined) as RunStatusFilter | undefined, pageToken, limit: 50 }).then(
      (p) => {
        if (stale) return;
        rows.current = new Map(p.items.map((r) => [r.runId, r]));
        setPage(p);
        setError(null);
      },
      (e: unknown) => !stale && setError(e instanceof ApiError ? `${e.message} (${e.code})` : String(e)),
    );
    return () => {
      stale = true;
    };
  }, [dagId, status, pageToken, reloads]);

  useEffect(() => {
    let reload: ReturnType<typeof setTimeout> | undefined;
    const scheduleReload = () => {
      // Bursts of new runs reload the page once.
      reload ??= setTimeout(() => {
        reload = undefined;
        setReloads((n) => n + 1);
      }, 300);
    };
    const stream = new LiveStream({
      filter: dagId ? { dagId } : {},
      onState: setLive,
      onSubscribed: scheduleReload,
      onEvent: (e) => {
        if (!e.event.startsWith('run.')) return;
        const row = rows.current.get(e.runId);
        if (row) {
          row.status = e.status as Run['status'];
          setPage((p) => (p ? { ...p, items: [...p.items] } : p));
          if (status && status !== e.status) scheduleReload();
        } else if (!pageToken && (!status || status === e.status)) {
          scheduleReload();
        }
      },
    });
    return () => {
      clearTimeout(reload);
      stream.close();
    };
  }, [dagId, status, pageToken]);

  const apply = (e: Event) => {
    e.preventDefault();
    const form = new FormData(e.currentTarget as HTMLFormElement);
    const field = (name: string) => {
      const v = form.get(name);
      return typeof v === 'string' ? v.trim() : '';
    };
    const q = new URLSearchParams();
    const d = field('dagId');
    const s = field('status');
    if (d) q.set('dagId', d);
    if (s) q.set('status', s);
    navigate(`/runs${q.size ? `?${q.toString()}` : ''}`);
  };

  const pageHref = (token: string | null) => {
    const q = new URLSearchParams(query);
    if (token) q.set('page', token);
    else q.delete('page');
    return `/runs${q.size ? `?${q.toString()}` : ''}`;
  };

  return (
    <>
      <div class="title">
        <h1>Runs</h1>
        <LiveBadge state={live} />
      </div>
      <form class="filters" onSubmit={apply} aria-label="Filter runs" key={`${dagId}|${status}`}>
        <label>
          DAG
          <input name="dagId" defaultValue={dagId} pattern="[A-Za-z0-9][A-Za-z0-9_.\-]*" />
        </label>
        <label>
          Status
          <select name="status">
            <option value="" selected={!status}>
              any
            </option>
            {RUN_STATES.map((s) => (
              <option value={s} key={s} selected={s === status}>
                {s}
              </option>
            ))}
          </select>
        </label>
        <button type="submit">Apply</button>
      </form>
      {error && (
        <p role="alert" class="error">
          {error}
        </p>
      )}
      {page && (
        <>
          <table class="runs">
            <caption class="sr-only">Runs, newest first</caption>
            <thead>
              <tr>
                <th scope="col">Run</th>
                <th scope="col">DAG</th>
                <th scope="col">Status</th>
                <th scope="col">Steps left</th>
                <th scope="col">Started</th>
                <th scope="col">Finished</th>
              </tr>
            </thead>
            <tbody>
              {page.items.map((r) => (
                <tr key={r.runId} data-run-id={r.runId}>
                  <td>
                    <Link href={`/runs/${r.runId}`} class="mono">
                      {r.runId.slice(0, 8)}
                    </Link>
                  </td>
                  <td>
                    {r.dagId} <span class="muted">v{r.version}</span>
                  </td>
                  <td>
                    <Status status={r.status} />
                  </td>
                  <td>
                    {r.stepsRemaining}/{r.stepsTotal}
                  </td>
                  <td>{time(r.startedUtc)}</td>
                  <td>{time(r.finishedUtc)}</td>
                </tr>
              ))}
            </tbody>
          </table>
          {page.items.length === 0 && <p>No runs match.</p>}
          <nav class="pager" aria-label="Pages">
            {pageToken && <Link href={pageHref(null)}>Newest</Link>}
            {page.nextPageToken && <Link href={pageHref(page.nextPageToken)}>Older runs</Link>}
          </nav>
        </>
      )}
    </>
  );
}
