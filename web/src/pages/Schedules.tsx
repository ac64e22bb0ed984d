import { canAdmin, consoleApi, type FireTimes, type Schedule, type ScheduleFire, type Session } from '../api';
import { Action } from '../components/Action';
import { localWithOffset, zoned } from '../components/format';
import { Link } from '../components/Link';
import { useLoad } from '../components/load';
import { Scroll } from '../components/Scroll';
import { Status, time } from '../components/Status';
import { useState } from 'preact/hooks';
import { dagHref, versionHref } from './Dags';
import { MorePager } from '../components/MorePager';

const scheduleHref = (id: string) => `/schedules/${encodeURIComponent(id)}`;
const NEXT_COUNT = 10;
const FIRES_LIMIT = 50;

function Paused({ paused }: { paused: boolean }) {
  return <Status status={paused ? 'paused' : 'active'} />;
}

/** The tenant's schedules, oldest first; times in each schedule's own zone. */
export function SchedulesPage() {
  const [token, setToken] = useState<string | undefined>(undefined);
  const { data, error } = useLoad(() => consoleApi.listSchedules({ pageToken: token, limit: 100 }), [token]);
  return (
    <>
      <h1>Schedules</h1>
      {error && (
        <p role="alert" class="error">
          {error}
        </p>
      )}
      {data && data.items.length === 0 && <p>No schedules yet.</p>}
      {data && data.items.length > 0 && (
        <Scroll label="Schedules">
          <table>
            <caption class="sr-only">Schedules, oldest first</caption>
            <thead>
              <tr>
                <th scope="col">Schedule</th>
                <th scope="col">DAG</th>
                <th scope="col">Cron</th>
                <th scope="col">Time zone</th>
                <th scope="col">State</th>
                <th scope="col">Next fire (schedule's zone)</th>
                <th scope="col">Last fire</th>
              </tr>
            </thead>
            <tbody>
              {data.items.map((s) => (
                <tr key={s.id} data-schedule-id={s.id}>
                  <td>
                    <Link href={scheduleHref(s.id)} class="mono">
                      {s.id.slice(0, 8)}
                    </Link>
                  </td>
                  <td>
                    <DagRef s={s} />
                  </td>
                  <td class="mono">{s.cron}</td>
                  <td>{s.timezone}</td>
                  <td>
                    <Paused paused={s.paused} />
                  </td>
                  <td>{s.paused ? '—' : zoned(s.nextFireAt, s.timezone)}</td>
                  <td>{zoned(s.lastFireAt, s.timezone)}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </Scroll>
      )}
      <MorePager next={data?.nextPageToken} label="More schedules" onMore={setToken} />
    </>
  );
}

function DagRef({ s }: { s: Schedule }) {
  return s.version === null ? (
    <>
      <Link href={dagHref(s.dagId)}>{s.dagId}</Link> <span class="muted">latest active</span>
    </>
  ) : (
    <Link href={versionHref(s.dagId, s.version)}>
      {s.dagId} v{s.version}
    </Link>
  );
}

/** One schedule: its settings, its next fire times in its zone, pause/resume, and its fire history. */
export function SchedulePage({ id, session }: { id: string; session: Session }) {
  const { data, error, reload } = useLoad<[Schedule, FireTimes, { items: ScheduleFire[] }]>(
    () =>
      Promise.all([
        consoleApi.getSchedule(id),
        consoleApi.scheduleNext(id, NEXT_COUNT),
        consoleApi.scheduleFires(id, FIRES_LIMIT),
      ]),
    [id],
  );
  if (error && !data) {
    return (
      <>
        <h1>Schedule not found</h1>
        <p role="alert" class="error">
          {error}
        </p>
        <p>
          <Link href="/schedules">All schedules</Link>
        </p>
      </>
    );
  }
  if (!data) return <p class="loading">Loading…</p>;
  const [s, next, fires] = data;
  return (
    <>
      <div class="title">
        <h1>
          Schedule <span class="mono">{s.id.slice(0, 8)}</span>
        </h1>
        <span data-testid="schedule-state">
          <Paused paused={s.paused} />
        </span>
      </div>
      <dl class="facts">
        <dt>DAG</dt>
        <dd>
          <DagRef s={s} />
        </dd>
        <dt>Cron</dt>
        <dd class="mono">{s.cron}</dd>
        <dt>Time zone</dt>
        <dd>{s.timezone}</dd>
        <dt>Catch-up</dt>
        <dd>{s.catchUp}</dd>
        <dt>Overlap</dt>
        <dd>{s.overlap}</dd>
        <dt>Inputs</dt>
        <dd class="mono">{JSON.stringify(s.inputs)}</dd>
        <dt>Last run</dt>
        <dd>
          {s.lastRunId ? (
            <Link href={`/runs/${s.lastRunId}`} class="mono">
              {s.lastRunId.slice(0, 8)}
            </Link>
          ) : (
            '—'
          )}
        </dd>
        <dt>Created</dt>
        <dd>
          {time(s.createdAt)} by {s.createdBy}
        </dd>
        <dt>Id</dt>
        <dd class="mono">{s.id}</dd>
      </dl>
      {canAdmin(session) && (
        <div class="actions">
          <Action
            key={String(s.paused)}
            label={s.paused ? 'Resume schedule' : 'Pause schedule'}
            run={() => consoleApi.setSchedulePaused(s.id, !s.paused)}
            onDone={reload}
          />
        </div>
      )}
      <section aria-labelledby="next-h">
        <h2 id="next-h">Next fire times</h2>
        {s.paused && <p class="notice">Paused: none of these fire until the schedule is resumed.</p>}
        <Scroll label="Next fire times">
          <table data-testid="next-fires">
            <thead>
              <tr>
                <th scope="col">In {s.timezone}</th>
                <th scope="col">UTC</th>
              </tr>
            </thead>
            <tbody>
              {next.items.map((f) => (
                <tr key={f.utc}>
                  <td class="mono">{localWithOffset(f.local)}</td>
                  <td class="mono">{f.utc.replace('T', ' ').replace(/\.000Z$|Z$/, ' UTC')}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </Scroll>
      </section>
      <section aria-labelledby="fires-h">
        <h2 id="fires-h">Fire history</h2>
        {fires.items.length === 0 ? (
          <p>No fires yet.</p>
        ) : (
          <Scroll label="Fire history">
            <table data-testid="fire-history">
              <caption class="sr-only">The latest {FIRES_LIMIT} fires, newest first</caption>
              <thead>
                <tr>
                  <th scope="col">Fire time ({s.timezone})</th>
                  <th scope="col">Outcome</th>
                  <th scope="col">Run</th>
                  <th scope="col">Fired at</th>
                </tr>
              </thead>
              <tbody>
                {fires.items.map((f) => (
                  <tr key={f.fireTime}>
                    <td>{zoned(f.fireTime, s.timezone)}</td>
                    <td>
                      <Status status={f.outcome} />
                      {f.error && <span class="error"> {f.error}</span>}
                    </td>
                    <td>
                      {f.runId ? (
                        <Link href={`/runs/${f.runId}`} class="mono">
                          {f.runId.slice(0, 8)}
                        </Link>
                      ) : (
                        '—'
                      )}
                    </td>
                    <td>{time(f.firedAt)}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          </Scroll>
        )}
      </section>
    </>
  );
}
