import { useEffect, useState } from 'preact/hooks';
import { api, onSignedOut, type Session } from './api';
import { Link } from './components/Link';
import { match, navigate, useLocation } from './router';
import { DagPage, DagsPage, DagVersionPage } from './pages/Dags';
import { RunPage } from './pages/Run';
import { RunsPage } from './pages/Runs';
import { SignInPage } from './pages/SignIn';

type Phase = { kind: 'loading' } | { kind: 'ready'; session: Session | null } | { kind: 'error'; message: string };

export function App() {
  const loc = useLocation();
  const [phase, setPhase] = useState<Phase>({ kind: 'loading' });

  useEffect(() => {
    // The CSRF token is never stored by the browser: it is read again with the session on each load.
    api.resume().then(
      (session) => setPhase({ kind: 'ready', session }),
      (e: unknown) => setPhase({ kind: 'error', message: e instanceof Error ? e.message : String(e) }),
    );
    return onSignedOut(() => setPhase({ kind: 'ready', session: null }));
  }, []);

  if (phase.kind === 'loading') return <p class="loading">Loading…</p>;
  if (phase.kind === 'error') {
    return (
      <main id="main">
        <h1>Ordo is not reachable</h1>
        <p role="alert">{phase.message}</p>
      </main>
    );
  }
  const session = phase.session;
  if (!session) {
    const next = loc.path === '/sign-in' ? (loc.query.get('next') ?? '/runs') : loc.path + location.search;
    return <SignInPage next={next} onSignedIn={(s) => setPhase({ kind: 'ready', session: s })} />;
  }
  if (loc.path === '/' || loc.path === '/sign-in') {
    navigate(loc.query.get('next') ?? '/runs', { replace: true });
    return null;
  }

  const signOut = async () => {
    await api.signOut().catch(() => undefined);
    setPhase({ kind: 'ready', session: null });
    navigate('/sign-in', { replace: true });
  };

  return (
    <>
      <a class="skip" href="#main">
        Skip to content
      </a>
      <header class="top">
        <span class="brand">Ordo</span>
        <nav aria-label="Main">
          <Link href="/runs" aria-current={loc.path.startsWith('/runs') ? 'page' : undefined}>
            Runs
          </Link>
          <Link href="/dags" aria-current={loc.path.startsWith('/dags') ? 'page' : undefined}>
            DAGs
          </Link>
        </nav>
        <span class="who" data-testid="who">
          {session.subject} · {session.tenantId ?? 'platform'}
        </span>
        <button type="button" onClick={() => void signOut()}>
          Sign out
        </button>
      </header>
      <main id="main" tabIndex={-1}>
        <Page path={loc.path} query={loc.query} session={session} />
      </main>
    </>
  );
}

function Page({ path, query, session }: { path: string; query: URLSearchParams; session: Session }) {
  let p: Record<string, string> | null;
  if (match('/runs', path)) return <RunsPage query={query} />;
  if ((p = match('/runs/:runId', path))) return <RunPage key={p.runId} runId={p.runId} session={session} />;
  if (match('/dags', path)) return <DagsPage />;
  if ((p = match('/dags/:dagId', path))) return <DagPage key={p.dagId} dagId={p.dagId} />;
  if ((p = match('/dags/:dagId/versions/:version', path))) {
    return <DagVersionPage key={path} dagId={p.dagId} version={Number(p.version)} />;
  }
  return (
    <>
      <h1>Not found</h1>
      <p>
        There is no page at this address. <Link href="/runs">Runs</Link>
      </p>
    </>
  );
}
