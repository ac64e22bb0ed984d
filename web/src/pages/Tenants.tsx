import { useState } from 'preact/hooks';
import { consoleApi, type Plan, type Tenant, type TenantQueues, type Usage } from '../api';
import { Action } from '../components/Action';
import { time } from '../components/Status';
import { Link } from '../components/Link';
import { describe, useLoad } from '../components/load';
import { Scroll } from '../components/Scroll';
import { Status } from '../components/Status';
import { UsageView } from './Usage';
import { MorePager } from '../components/MorePager';

const tenantHref = (id: string) => `/tenants/${encodeURIComponent(id)}`;
const PAGE = 100;

/** The platform's tenants with their plans; the operator enables and disables them. */
export function TenantsPage() {
  const [token, setToken] = useState<string | undefined>(undefined);
  const { data, error, reload } = useLoad<[{ items: Tenant[]; nextPageToken: string | null }, TenantQueues]>(
    () => Promise.all([consoleApi.listTenants({ pageToken: token, limit: PAGE }), consoleApi.queues({ limit: 200 })]),
    [token],
  );
  const plans = new Map((data?.[1].items ?? []).map((q) => [q.tenantId, q.plan?.id ?? null]));
  return (
    <>
      <h1>Tenants</h1>
      {error && (
        <p role="alert" class="error">
          {error}
        </p>
      )}
      {data && data[0].items.length === 0 && <p>No tenants.</p>}
      {data && data[0].items.length > 0 && (
        <Scroll label="Tenants">
          <table>
            <thead>
              <tr>
                <th scope="col">Tenant</th>
                <th scope="col">Name</th>
                <th scope="col">Status</th>
                <th scope="col">Plan</th>
                <th scope="col">Created</th>
                <th scope="col">Action</th>
              </tr>
            </thead>
            <tbody>
              {data[0].items.map((t) => (
                <tr key={t.id} data-tenant-id={t.id}>
                  <td>
                    <Link href={tenantHref(t.id)} class="mono">
                      {t.id}
                    </Link>
                  </td>
                  <td>{t.name}</td>
                  <td>
                    <Status status={t.status} />
                  </td>
                  <td>{plans.has(t.id) ? (plans.get(t.id) ?? 'none') : '—'}</td>
                  <td>{time(t.createdAt)}</td>
                  <td>
                    <TenantSwitch tenant={t} onDone={reload} />
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </Scroll>
      )}
      <MorePager next={data?.[0]?.nextPageToken} label="More tenants" onMore={setToken} />
    </>
  );
}

function TenantSwitch({ tenant, onDone }: { tenant: Tenant; onDone: () => void }) {
  return tenant.status === 'active' ? (
    <Action
      key="disable"
      label={`Disable ${tenant.id}`}
      danger
      confirm={`Disable ${tenant.id}? Its tokens and sessions are refused until it is enabled.`}
      run={() => consoleApi.setTenantEnabled(tenant.id, false)}
      onDone={onDone}
    />
  ) : (
    <Action
      key="enable"
      label={`Enable ${tenant.id}`}
      run={() => consoleApi.setTenantEnabled(tenant.id, true)}
      onDone={onDone}
    />
  );
}

/** One tenant as the operator sees it: status, plan (assignable), usage and queue. */
export function TenantPage({ tenantId }: { tenantId: string }) {
  const { data, error, reload } = useLoad<[TenantQueues, Usage, { items: Plan[] }]>(
    () =>
      Promise.all([
        consoleApi.queues({ tenantId, limit: 1 }),
        consoleApi.tenantUsage(tenantId),
        consoleApi.listPlans(),
      ]),
    [tenantId],
  );
  const queue = data?.[0].items.find((q) => q.tenantId === tenantId);
  return (
    <>
      <h1>
        Tenant <span class="mono">{tenantId}</span>
      </h1>
      <p>
        <Link href="/tenants">All tenants</Link> ·{' '}
        <Link href={`/queues?tenantId=${encodeURIComponent(tenantId)}`}>Queue</Link>
      </p>
      {error && (
        <p role="alert" class="error">
          {error}
        </p>
      )}
      {data && (
        <>
          <PlanForm tenantId={tenantId} current={queue?.plan?.id ?? null} plans={data[2].items} onDone={reload} />
          <UsageView usage={data[1]} label={`Usage of ${tenantId}`} />
        </>
      )}
    </>
  );
}

function PlanForm(props: { tenantId: string; current: string | null; plans: Plan[]; onDone: () => void }) {
  const [error, setError] = useState<string | null>(null);
  const [saved, setSaved] = useState<string | null>(null);
  if (props.plans.length === 0) return <p>No plans are defined: the instance's settings apply to every tenant.</p>;
  const submit = async (e: Event) => {
    e.preventDefault();
    const planId = ((e.currentTarget as HTMLFormElement).elements.namedItem('planId') as HTMLSelectElement).value;
    setError(null);
    setSaved(null);
    try {
      await consoleApi.assignPlan(props.tenantId, planId);
      setSaved(`Plan ${planId} assigned.`);
      props.onDone();
    } catch (err) {
      setError(describe(err));
    }
  };
  return (
    <form class="filters" onSubmit={(e) => void submit(e)} aria-label="Assign a plan" key={props.current ?? ''}>
      <label>
        Plan
        <select name="planId">
          {props.plans.map((p) => (
            <option key={p.id} value={p.id} selected={p.id === props.current}>
              {p.id}
              {p.description ? `: ${p.description}` : ''}
            </option>
          ))}
        </select>
      </label>
      <button type="submit">Assign plan</button>
      <span role="status">{saved}</span>
      {error && (
        <span role="alert" class="error">
          {error}
        </span>
      )}
    </form>
  );
}

/** Each tenant's queue as the engine sees it: ready, waiting and in-flight steps against its caps. */
export function QueuesPage({ query }: { query: URLSearchParams }) {
  const tenantId = query.get('tenantId') ?? undefined;
  const [token, setToken] = useState<string | undefined>(undefined);
  const { data, error } = useLoad(
    () => consoleApi.queues({ tenantId, pageToken: token, limit: 100 }),
    [tenantId, token],
  );
  return (
    <>
      <h1>Queues</h1>
      {tenantId && (
        <p>
          Tenant <span class="mono">{tenantId}</span> only. <Link href="/queues">All tenants</Link>
        </p>
      )}
      {error && (
        <p role="alert" class="error">
          {error}
        </p>
      )}
      {data && (
        <>
          <p class="muted">
            Read at {time(data.at)}; claims per second over the last {data.claimsWindowSeconds} s; limit refusals since{' '}
            {time(data.limitHitsSince)}.
          </p>
          <Scroll label="Queues">
            <table data-testid="queues">
              <thead>
                <tr>
                  <th scope="col">Tenant</th>
                  <th scope="col">Plan</th>
                  <th scope="col">Ready</th>
                  <th scope="col">Waiting</th>
                  <th scope="col">In flight / cap</th>
                  <th scope="col">Oldest ready</th>
                  <th scope="col">Claims/s</th>
                  <th scope="col">Limit refusals</th>
                </tr>
              </thead>
              <tbody>
                {data.items.map((q) => (
                  <tr key={q.tenantId}>
                    <td>
                      <Link href={tenantHref(q.tenantId)} class="mono">
                        {q.tenantId}
                      </Link>
                    </td>
                    <td>{q.plan?.id ?? 'none'}</td>
                    <td>{q.steps.ready}</td>
                    <td>{q.steps.waiting}</td>
                    <td>
                      {q.steps.inFlight} / {q.inFlightCap}
                      {q.sharedInFlightCap !== null && <span class="muted"> (shared {q.sharedInFlightCap})</span>}
                    </td>
                    <td>{q.oldestReadySeconds === null ? '—' : `${q.oldestReadySeconds.toFixed(1)} s`}</td>
                    <td>{q.claimsPerSecond.toFixed(2)}</td>
                    <td>
                      {q.limitHits.length === 0
                        ? '—'
                        : q.limitHits.map((h) => `${h.limit} ×${String(h.hits)}`).join(', ')}
                    </td>
                  </tr>
                ))}
              </tbody>
            </table>
          </Scroll>
          <MorePager next={data?.nextPageToken} label="More tenants" onMore={setToken} />
        </>
      )}
    </>
  );
}
