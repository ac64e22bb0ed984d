import { useEffect, useState } from 'preact/hooks';
import { api, ApiError, type DagGraph, type DagVersion, type DagVersionSummary, type Page } from '../api';
import { Graph } from '../components/Graph';
import { Link } from '../components/Link';
import { Status, time } from '../components/Status';

function describe(e: unknown): string {
  return e instanceof ApiError ? `${e.message} (${e.code})` : String(e);
}

function useLoad<T>(load: () => Promise<T>, deps: unknown[]): { data: T | null; error: string | null } {
  const [state, setState] = useState<{ data: T | null; error: string | null }>({ data: null, error: null });
  useEffect(() => {
    let stale = false;
    setState({ data: null, error: null });
    load().then(
      (data) => !stale && setState({ data, error: null }),
      (e: unknown) => !stale && setState({ data: null, error: describe(e) }),
    );
    return () => {
      stale = true;
    };
    // The caller names what the load depends on.
  }, deps);
  return state;
}

const dagHref = (dagId: string) => `/dags/${encodeURIComponent(dagId)}`;
const versionHref = (dagId: string, v: number) => `${dagHref(dagId)}/versions/${String(v)}`;

/** The tenant's DAGs: the API lists versions (dagId ascending, newest first), grouped here by DAG. */
export function DagsPage() {
  const [token, setToken] = useState<string | undefined>(undefined);
  const { data, error } = useLoad<Page<DagVersionSummary>>(
    () => api.listDags({ pageToken: token, limit: 200 }),
    [token],
  );
  const latest = new Map<string, DagVersionSummary & { count: number }>();
  for (const v of data?.items ?? []) {
    const seen = latest.get(v.dagId);
    if (seen) seen.count++;
    else latest.set(v.dagId, { ...v, count: 1 });
  }
  return (
    <>
      <h1>DAGs</h1>
      {error && (
        <p role="alert" class="error">
          {error}
        </p>
      )}
      {data && (
        <table>
          <thead>
            <tr>
              <th scope="col">DAG</th>
              <th scope="col">Latest version</th>
              <th scope="col">Status</th>
              <th scope="col">Versions on this page</th>
              <th scope="col">Published</th>
            </tr>
          </thead>
          <tbody>
            {[...latest.values()].map((d) => (
              <tr key={d.dagId}>
                <td>
                  <Link href={dagHref(d.dagId)}>{d.dagId}</Link>
                </td>
                <td>
                  <Link href={versionHref(d.dagId, d.version)}>v{d.version}</Link>
                </td>
                <td>
                  <Status status={d.status} />
                </td>
                <td>{d.count}</td>
                <td>{time(d.createdAt)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      {data && latest.size === 0 && <p>No DAGs published yet.</p>}
      {data?.nextPageToken && (
        <nav class="pager" aria-label="Pages">
          <button type="button" onClick={() => setToken(data.nextPageToken ?? undefined)}>
            More DAGs
          </button>
        </nav>
      )}
    </>
  );
}

/** One DAG's versions, newest first. */
export function DagPage({ dagId }: { dagId: string }) {
  const { data, error } = useLoad(() => api.listDags({ dagId, limit: 200 }), [dagId]);
  return (
    <>
      <h1>
        DAG <span class="mono">{dagId}</span>
      </h1>
      <p>
        <Link href={`/runs?dagId=${encodeURIComponent(dagId)}`}>Runs of this DAG</Link>
      </p>
      {error && (
        <p role="alert" class="error">
          {error}
        </p>
      )}
      {data && data.items.length === 0 && <p role="alert">No DAG {dagId} in this tenant.</p>}
      {data && data.items.length > 0 && (
        <table>
          <caption class="sr-only">Versions of {dagId}</caption>
          <thead>
            <tr>
              <th scope="col">Version</th>
              <th scope="col">Status</th>
              <th scope="col">Owner</th>
              <th scope="col">Content hash</th>
              <th scope="col">Published</th>
            </tr>
          </thead>
          <tbody>
            {data.items.map((v) => (
              <tr key={v.version}>
                <td>
                  <Link href={versionHref(dagId, v.version)}>v{v.version}</Link>
                </td>
                <td>
                  <Status status={v.status} />
                </td>
                <td>{v.owner}</td>
                <td class="mono">{v.contentHash.slice(0, 12)}</td>
                <td>{time(v.createdAt)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </>
  );
}

/** One version: its graph and its normalized definition. */
export function DagVersionPage({ dagId, version }: { dagId: string; version: number }) {
  const { data, error } = useLoad<[DagVersion, DagGraph]>(
    () => Promise.all([api.dagVersion(dagId, version), api.dagGraph(dagId, version)]),
    [dagId, version],
  );
  return (
    <>
      <h1>
        <Link href={dagHref(dagId)}>{dagId}</Link> v{version}
      </h1>
      {error && (
        <p role="alert" class="error">
          {error}
        </p>
      )}
      {data && (
        <>
          <dl class="facts">
            <dt>Status</dt>
            <dd>
              <Status status={data[0].status} />
            </dd>
            <dt>Owner</dt>
            <dd>{data[0].owner}</dd>
            <dt>Content hash</dt>
            <dd class="mono">{data[0].contentHash}</dd>
            <dt>Published</dt>
            <dd>{time(data[0].createdAt)}</dd>
          </dl>
          <section aria-labelledby="graph-h">
            <h2 id="graph-h">Graph</h2>
            <Graph
              label={`Steps of ${dagId} version ${String(version)}`}
              nodes={data[1].nodes.map((n) => ({
                id: n.id,
                state: n.disabled ? 'disabled' : 'definition',
                detail: `${n.plugin}${n.disabled ? ', disabled' : ''}`,
              }))}
              edges={data[1].edges}
            />
          </section>
          <section aria-labelledby="def-h">
            <h2 id="def-h">Definition</h2>
            <pre class="code" tabIndex={0} aria-label="Definition">
              {JSON.stringify(data[0].definition, null, 2)}
            </pre>
          </section>
        </>
      )}
    </>
  );
}
