import { useState } from 'preact/hooks';
import {
  api,
  canAdmin,
  consoleApi,
  type DagGraph,
  type DagVersion,
  type DagVersionSummary,
  type Page,
  type Session,
} from '../api';
import { Action } from '../components/Action';
import { Graph } from '../components/Graph';
import { Link } from '../components/Link';
import { useLoad } from '../components/load';
import { Status, time } from '../components/Status';
import { navigate } from '../router';
import { MorePager } from '../components/MorePager';

export const dagHref = (dagId: string) => `/dags/${encodeURIComponent(dagId)}`;
export const versionHref = (dagId: string, v: number) => `${dagHref(dagId)}/versions/${String(v)}`;

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
      <MorePager next={data?.nextPageToken} label="More DAGs" onMore={setToken} />
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
      {data && data.items.length > 1 && <CompareForm dagId={dagId} versions={data.items.map((v) => v.version)} />}
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
export function DagVersionPage({ dagId, version, session }: { dagId: string; version: number; session: Session }) {
  const { data, error, reload } = useLoad<[DagVersion, DagGraph]>(
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
          <div class="actions">
            {canAdmin(session) && (
              <Action
                key={data[0].status}
                label={data[0].status === 'active' ? 'Disable version' : 'Enable version'}
                danger={data[0].status === 'active'}
                run={() =>
                  consoleApi.setDagVersionStatus(dagId, version, data[0].status === 'active' ? 'disable' : 'enable')
                }
                onDone={reload}
              />
            )}
            {version > 1 && <Link href={diffHref(dagId, version - 1, version)}>Compare with v{version - 1}</Link>}
          </div>
          {data[0].status === 'disabled' && <p class="notice">This version is disabled: new runs cannot use it.</p>}
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

const diffHref = (dagId: string, from: number, to: number) =>
  `${dagHref(dagId)}/diff?from=${String(from)}&to=${String(to)}`;

/** Picks two versions of a DAG to compare; the newest against the one before it by default. */
function CompareForm({ dagId, versions }: { dagId: string; versions: number[] }) {
  const sorted = [...versions].sort((a, b) => b - a);
  const submit = (e: Event) => {
    e.preventDefault();
    const form = new FormData(e.currentTarget as HTMLFormElement);
    navigate(diffHref(dagId, Number(form.get('from')), Number(form.get('to'))));
  };
  // Preact sets a select's initial value through its options, not defaultValue.
  const options = (initial: number) =>
    sorted.map((v) => (
      <option key={v} value={v} selected={v === initial}>
        v{v}
      </option>
    ));
  return (
    <form class="filters" onSubmit={submit} aria-label="Compare versions">
      <label>
        From
        <select name="from">{options(sorted[1])}</select>
      </label>
      <label>
        To
        <select name="to">{options(sorted[0])}</select>
      </label>
      <button type="submit">Compare</button>
    </form>
  );
}
