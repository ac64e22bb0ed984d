import { consoleApi, type Usage } from '../api';
import { bytes, zoned } from '../components/format';
import { useLoad } from '../components/load';
import { Scroll } from '../components/Scroll';

type Counted = keyof Usage['usage'];
type LimitName = keyof Usage['limits'];

/** What the tenant uses now against the limit that bounds it (the plan's, with overrides applied). */
const COUNTED: { use: Counted; limit: LimitName; label: string; size?: boolean }[] = [
  { use: 'runsThisPeriod', limit: 'monthlyRuns', label: 'Runs this period' },
  { use: 'concurrentRuns', limit: 'maxConcurrentRuns', label: 'Runs not yet ended' },
  { use: 'queuedSteps', limit: 'maxQueuedSteps', label: 'Steps queued' },
  { use: 'stepsInFlight', limit: 'maxStepsInFlight', label: 'Steps in flight' },
  { use: 'artifactBytes', limit: 'maxArtifactBytes', label: 'Artifacts stored', size: true },
];

const RATES: { limit: LimitName; label: string; size?: boolean }[] = [
  { limit: 'runsPerMinute', label: 'Runs created per minute' },
  { limit: 'runsBurst', label: 'Runs created at once (burst)' },
  { limit: 'requestsPerSecondPerToken', label: 'API requests per second, per token' },
  { limit: 'requestsPerSecondPerTenant', label: 'API requests per second, whole tenant' },
  { limit: 'maxExportBytes', label: 'Size of one export', size: true },
  { limit: 'weight', label: 'Fair-share weight' },
];

/** The tenant's usage, its limits, the period and when it resets; also the operator's view of a tenant. */
export function UsageView({ usage, label }: { usage: Usage; label: string }) {
  const fmt = (n: number, size?: boolean) => (size ? bytes(n) : n.toLocaleString('en'));
  const limitOf = (name: LimitName) => {
    const v = usage.limits[name];
    return typeof v === 'number' ? v : null;
  };
  return (
    <>
      <dl class="facts" data-testid="usage-facts">
        <dt>Plan</dt>
        <dd>{usage.plan ?? "none: the instance's settings apply"}</dd>
        <dt>Period</dt>
        <dd>
          {zoned(usage.period.start, usage.period.timeZone)} to {zoned(usage.period.resetsAt, usage.period.timeZone)}
        </dd>
        <dt>Resets</dt>
        <dd data-testid="usage-resets">
          {zoned(usage.period.resetsAt, usage.period.timeZone)} ({usage.period.timeZone})
        </dd>
      </dl>
      <h2>Use against limits</h2>
      <Scroll label={`${label}: use against limits`}>
        <table data-testid="usage-table">
          <thead>
            <tr>
              <th scope="col">What</th>
              <th scope="col">Now</th>
              <th scope="col">Limit</th>
              <th scope="col">Used</th>
            </tr>
          </thead>
          <tbody>
            {COUNTED.map((c) => {
              const used = usage.usage[c.use];
              const limit = limitOf(c.limit);
              const pct = limit ? Math.min(100, Math.round((used / limit) * 100)) : null;
              return (
                <tr key={c.use} data-usage={c.use}>
                  <th scope="row">{c.label}</th>
                  <td>{fmt(used, c.size)}</td>
                  <td>{limit === null ? 'no limit' : fmt(limit, c.size)}</td>
                  <td>
                    {pct === null ? (
                      '—'
                    ) : (
                      <span class="used">
                        <meter min={0} max={100} value={pct} aria-label={`${c.label}: ${String(pct)}% of the limit`} />{' '}
                        {pct}%
                      </span>
                    )}
                  </td>
                </tr>
              );
            })}
          </tbody>
        </table>
      </Scroll>
      <h2>Rates and other limits</h2>
      <Scroll label={`${label}: rates and other limits`}>
        <table>
          <thead>
            <tr>
              <th scope="col">What</th>
              <th scope="col">Limit</th>
            </tr>
          </thead>
          <tbody>
            {RATES.map((r) => {
              const limit = limitOf(r.limit);
              return (
                <tr key={r.limit}>
                  <th scope="row">{r.label}</th>
                  <td>{limit === null ? 'no limit' : fmt(limit, r.size)}</td>
                </tr>
              );
            })}
          </tbody>
        </table>
      </Scroll>
    </>
  );
}

export function UsagePage() {
  const { data, error } = useLoad(() => consoleApi.usage(), []);
  return (
    <>
      <h1>Usage</h1>
      {error && (
        <p role="alert" class="error">
          {error}
        </p>
      )}
      {data && <UsageView usage={data} label="Usage" />}
    </>
  );
}
