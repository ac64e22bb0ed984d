import { useState } from 'preact/hooks';
import { canAdmin, consoleApi, type Bundle, type Session } from '../api';
import { Action } from '../components/Action';
import { bytes } from '../components/format';
import { Link } from '../components/Link';
import { useLoad } from '../components/load';
import { Scroll } from '../components/Scroll';
import { Status, time } from '../components/Status';
import { versionHref } from './Dags';
import { MorePager } from '../components/MorePager';

const bundleHref = (hash: string) => `/bundles/${hash}`;

/** Signed bundles imported into the tenant, newest first. */
export function BundlesPage() {
  const [token, setToken] = useState<string | undefined>(undefined);
  const { data, error } = useLoad(() => consoleApi.listBundles({ pageToken: token, limit: 100 }), [token]);
  return (
    <>
      <h1>Bundles</h1>
      <p>
        Signed bundles imported into this tenant. The keys they are checked against are on{' '}
        <Link href="/trust">Trust keys</Link>.
      </p>
      {error && (
        <p role="alert" class="error">
          {error}
        </p>
      )}
      {data && data.items.length === 0 && <p>No bundles imported yet.</p>}
      {data && data.items.length > 0 && (
        <Scroll label="Bundles">
          <table>
            <thead>
              <tr>
                <th scope="col">Bundle</th>
                <th scope="col">Version</th>
                <th scope="col">Owner</th>
                <th scope="col">Signed by key</th>
                <th scope="col">DAGs</th>
                <th scope="col">Imported</th>
              </tr>
            </thead>
            <tbody>
              {data.items.map((b) => (
                <tr key={b.bundleHash}>
                  <td>
                    <Link href={bundleHref(b.bundleHash)}>{b.name}</Link>
                  </td>
                  <td>{b.version}</td>
                  <td>{b.owner}</td>
                  <td class="mono">{b.kid}</td>
                  <td>{b.dags.length}</td>
                  <td>
                    {time(b.importedAt)} by {b.importedBy}
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </Scroll>
      )}
      <MorePager next={data?.nextPageToken} label="More bundles" onMore={setToken} />
    </>
  );
}

/** One bundle: its manifest's facts, the DAG versions it published, its scripts and files. */
export function BundlePage({ hash }: { hash: string }) {
  const { data, error } = useLoad<Bundle>(() => consoleApi.getBundle(hash), [hash]);
  if (error) {
    return (
      <>
        <h1>Bundle not found</h1>
        <p role="alert" class="error">
          {error}
        </p>
        <p>
          <Link href="/bundles">All bundles</Link>
        </p>
      </>
    );
  }
  if (!data) return <p class="loading">Loading…</p>;
  return (
    <>
      <h1>
        Bundle {data.name} {data.version}
      </h1>
      <dl class="facts">
        <dt>Owner</dt>
        <dd>{data.owner}</dd>
        <dt>Signed by key</dt>
        <dd class="mono">{data.kid}</dd>
        <dt>Created</dt>
        <dd>{time(data.created)}</dd>
        <dt>Imported</dt>
        <dd>
          {time(data.importedAt)} by {data.importedBy}
        </dd>
        <dt>Bundle hash</dt>
        <dd class="mono">{data.bundleHash}</dd>
      </dl>
      <h2>DAGs</h2>
      <Scroll label="DAGs in the bundle">
        <table>
          <thead>
            <tr>
              <th scope="col">DAG version</th>
              <th scope="col">Path in the bundle</th>
            </tr>
          </thead>
          <tbody>
            {data.dags.map((d) => (
              <tr key={d.path}>
                <td>
                  <Link href={versionHref(d.dagId, d.version)}>
                    {d.dagId} v{d.version}
                  </Link>
                </td>
                <td class="mono">{d.path}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </Scroll>
      <h2>Files</h2>
      <Scroll label="Files in the bundle">
        <table>
          <thead>
            <tr>
              <th scope="col">Path</th>
              <th scope="col">Size</th>
              <th scope="col">SHA-256</th>
            </tr>
          </thead>
          <tbody>
            {data.files.map((f) => (
              <tr key={f.path}>
                <td class="mono">
                  {f.path}
                  {data.scripts.includes(f.path) && <span class="muted"> (script)</span>}
                </td>
                <td>{bytes(f.size)}</td>
                <td class="mono">{f.sha256.slice(0, 16)}…</td>
              </tr>
            ))}
          </tbody>
        </table>
      </Scroll>
    </>
  );
}

/** The keys the tenant trusts to sign bundles and DAGs, and whether it requires signatures. */
export function TrustPage({ session }: { session: Session }) {
  const [token, setToken] = useState<string | undefined>(undefined);
  const { data, error, reload } = useLoad(
    () => Promise.all([consoleApi.listTrustKeys({ pageToken: token, limit: 100 }), consoleApi.policy()]),
    [token],
  );
  const admin = canAdmin(session);
  return (
    <>
      <h1>Trust keys</h1>
      {error && (
        <p role="alert" class="error">
          {error}
        </p>
      )}
      {data && (
        <>
          <p data-testid="policy">
            {data[1].requireSignedDags
              ? 'Policy: every new DAG version must be signed by one of these keys.'
              : 'Policy: unsigned DAG versions are accepted; bundles are still checked against these keys.'}
          </p>
          {data[0].items.length === 0 && <p>No trusted keys.</p>}
          {data[0].items.length > 0 && (
            <Scroll label="Trust keys">
              <table>
                <thead>
                  <tr>
                    <th scope="col">Key id</th>
                    <th scope="col">Owner</th>
                    <th scope="col">State</th>
                    <th scope="col">Public key (x)</th>
                    <th scope="col">Added</th>
                    <th scope="col">Expires</th>
                    {admin && <th scope="col">Action</th>}
                  </tr>
                </thead>
                <tbody>
                  {data[0].items.map((k) => {
                    const expired = k.expiresAt !== null && Date.parse(k.expiresAt) <= Date.now();
                    const state = k.revokedAt ? 'revoked' : expired ? 'expired' : 'active';
                    return (
                      <tr key={k.kid} data-kid={k.kid}>
                        <td class="mono">{k.kid}</td>
                        <td>{k.owner}</td>
                        <td>
                          <Status status={state} />
                          {k.revokedAt && <span class="muted"> {time(k.revokedAt)}</span>}
                        </td>
                        <td class="mono">{k.publicJwk.x.slice(0, 16)}…</td>
                        <td>
                          {time(k.createdAt)} by {k.createdBy}
                        </td>
                        <td>{time(k.expiresAt)}</td>
                        {admin && (
                          <td>
                            {!k.revokedAt && (
                              <Action
                                label="Revoke"
                                danger
                                confirm={`Revoke key ${k.kid}? Bundles and DAGs it signs are refused from now on.`}
                                run={() => consoleApi.revokeTrustKey(k.kid)}
                                onDone={reload}
                              />
                            )}
                          </td>
                        )}
                      </tr>
                    );
                  })}
                </tbody>
              </table>
            </Scroll>
          )}
          <MorePager next={data[0]?.nextPageToken} label="More keys" onMore={setToken} />
        </>
      )}
    </>
  );
}
